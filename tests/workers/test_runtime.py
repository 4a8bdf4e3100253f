"""The agent runtime end to end on the in-process executor: Django state store, real streams."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from pydantic import BaseModel

from chat.models import ChatSession, Checkpoint, Message, Run
from chat.state.store import DjangoStateStore
from streams.backends import InMemoryStreamManager, RedisStreamManager, StreamManager
from streams.protocol import (
    ErrorChunk,
    OutputChunk,
    RunInterrupted,
    StatePatch,
    StepCommitted,
    SubAgentStart,
    TextDelta,
    ToolEnd,
    ToolInputError,
)
from tests.chat.ai_sdk.client import ChatClient
from tests.workers.runs import assert_live_equals_stored, live_body, stored_reply
from workers.exceptions import LLMError, RunConflictError, RunErrorCode, UnknownAgentError
from workers.executors import InProcessExecutor
from workers.llm.scripted import ScriptedModel, ScriptedToolCall, ScriptedTurn
from workers.runtime.agents import define_agent, define_tool
from workers.runtime.context import ToolContext

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_model(settings: Any) -> None:
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "0"}


@pytest.fixture(params=["memory", "redis"])
async def streams(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        yield InMemoryStreamManager()
        return
    manager = RedisStreamManager(request.getfixturevalue("redis_url"), key_prefix=f"test:{uuid.uuid4().hex[:8]}:")
    yield manager
    await manager.aclose()


async def run(streams: StreamManager, agent: Any, message: str, **options: Any) -> tuple[Any, Any]:
    executor = InProcessExecutor(DjangoStateStore(), streams)
    handle = await executor.execute(agent, message, **options)
    outcome = await handle.result(timeout=30)
    return handle, outcome


@pytest.mark.parametrize(
    ("agent", "question"),
    [("chat", "Hello there"), ("tools", "What is 6 times 7?"), ("research", "How do streams resume?")],
)
async def test_demo_agents_run_and_the_live_view_equals_the_stored_one(
    streams: StreamManager, chat_client: ChatClient, agent: str, question: str
) -> None:
    handle, outcome = await run(streams, agent, question)
    assert outcome.status == "completed", outcome
    run_row = await Run.objects.aget(pk=handle.run_id)
    assert (run_row.status, run_row.start_sequence) == ("completed", 0)
    assert run_row.step_count >= 1 and run_row.usage["completion_tokens"] > 0
    assert await Checkpoint.objects.filter(run=run_row).acount() == run_row.step_count
    info = await streams.get_stream_info(handle.session_id)
    assert info is not None and info.status == "ended"
    chunks = [c for c, _ in await streams.get_all_chunks(handle.session_id)]
    assert sum(isinstance(c, StepCommitted) for c in chunks) == run_row.step_count
    store = DjangoStateStore()
    body = await live_body(streams, handle.session_id, handle.start_sequence, handle.message_id)
    stored = await stored_reply(store, streams, handle.session_id)
    assert stored["id"] == handle.message_id
    assert_live_equals_stored(chat_client, body, stored, question)
    if agent == "tools":
        assert "The result is 42.0" in outcome.output
        assert (await ChatSession.objects.aget(pk=handle.session_id)).state == {"calculations": 1}
        assert any(isinstance(c, StatePatch) for c in chunks)
    if agent == "research":
        subagent_chunks = [c for c in chunks if c.agent_id != handle.run_id]
        assert any(isinstance(c, SubAgentStart) for c in chunks) and any(
            isinstance(c, TextDelta) for c in subagent_chunks
        )
        assert all(c.agent_type == "researcher" for c in subagent_chunks)
        assert run_row.step_count == 3 and len(outcome.output.split()) > 150


async def test_multi_turn_runs_continue_the_stream(streams: StreamManager) -> None:
    first, _ = await run(streams, "chat", "One")
    second, outcome = await run(streams, "chat", "Two", session_id=first.session_id)
    assert outcome.status == "completed"
    info = await streams.get_stream_info(first.session_id)
    assert info is not None and second.start_sequence > 0 and info.latest_sequence > second.start_sequence
    chunks = await streams.get_chunks_from_sequence(first.session_id, second.start_sequence)
    assert {c.agent_id for c, _ in chunks} == {second.run_id}
    contents = [
        m.content async for m in Message.objects.filter(session_id=first.session_id, role="user").order_by("position")
    ]
    assert contents == ["One", "Two"]


class Numbers(BaseModel):
    a: int
    b: int


def divide(args: Numbers, context: ToolContext) -> float:
    return args.a / args.b


def bad_patch(args: Numbers, context: ToolContext) -> None:
    context.apply_patch([{"op": "replace", "path": "/missing/deep", "value": 1}])


def edge_script(messages: list) -> ScriptedTurn:  # type: ignore[type-arg]
    if messages[-1].role == "tool":
        return ScriptedTurn(text="Handled.")
    return ScriptedTurn(
        tool_calls=[
            ScriptedToolCall("divide", {"a": 1, "b": 0}),  # raises
            ScriptedToolCall("divide", {"a": "x"}),  # fails the schema
            ScriptedToolCall("divide", '{"a": 1,'),  # not JSON
            ScriptedToolCall("bad_patch", {"a": 1, "b": 2}),  # a patch that does not apply
        ]
    )


async def test_tool_failures_are_recorded_and_the_run_goes_on(streams: StreamManager, chat_client: ChatClient) -> None:
    agent = define_agent(
        "edges",
        "test",
        tools=[define_tool("divide", "a/b", Numbers, divide), define_tool("bad_patch", "x", Numbers, bad_patch)],
        llm=ScriptedModel(edge_script, delay=(0, 0)),
        register=False,
    )
    handle, outcome = await run(streams, agent, "go")
    assert outcome.status == "completed"
    chunks = [c for c, _ in await streams.get_all_chunks(handle.session_id)]
    ends = [c for c in chunks if isinstance(c, ToolEnd)]
    assert [c.success for c in ends] == [False, False]
    assert ends[0].error == "division by zero"
    assert ends[1].error is not None and ends[1].error.startswith("State patch does not apply")
    input_errors = [c for c in chunks if isinstance(c, ToolInputError)]
    assert len(input_errors) == 2 and input_errors[1].input == '{"a": 1,'
    tool_messages = [m async for m in Message.objects.filter(session_id=handle.session_id, role="tool")]
    assert len(tool_messages) == 4 and all(m.metadata.get("error") for m in tool_messages)
    assert (await ChatSession.objects.aget(pk=handle.session_id)).state == {}
    body = await live_body(streams, handle.session_id, handle.start_sequence, handle.message_id)
    assert_live_equals_stored(
        chat_client, body, await stored_reply(DjangoStateStore(), streams, handle.session_id), "go"
    )


@pytest.mark.parametrize(
    ("turn", "code"),
    [
        (
            ScriptedTurn(
                text="partial",
                error=LLMError("upstream 503", RunErrorCode.PROVIDER_OVERLOADED, True),
                error_after_tokens=1,
            ),
            "provider_overloaded",
        ),
        (ScriptedTurn(tool_calls=[ScriptedToolCall("divide", {"a": 1, "b": 1})] * 1), "max_steps_exceeded"),
    ],
)
async def test_run_level_errors_fail_the_run_with_a_typed_error(
    streams: StreamManager, turn: ScriptedTurn, code: str
) -> None:
    agent = define_agent(
        "failing",
        "test",
        tools=[define_tool("divide", "a/b", Numbers, divide)],
        llm=ScriptedModel(lambda m: turn, delay=(0, 0)),
        max_steps=2,
        register=False,
    )
    handle, outcome = await run(streams, agent, "go")
    assert (outcome.status, outcome.error_code) == ("failed", code)
    row = await Run.objects.aget(pk=handle.run_id)
    assert (row.status, row.error_code) == ("failed", code) and row.error_message
    assert (await ChatSession.objects.aget(pk=handle.session_id)).status == "failed"
    info = await streams.get_stream_info(handle.session_id)
    assert info is not None and info.status == "failed"
    errors = [c for c, _ in await streams.get_all_chunks(handle.session_id) if isinstance(c, ErrorChunk)]
    assert len(errors) == 1 and errors[0].code == code


class Answer(BaseModel):
    answer: int


@pytest.mark.parametrize(("text", "status"), [('{"answer": 42}', "completed"), ("forty-two", "failed")])
async def test_output_schema(streams: StreamManager, text: str, status: str) -> None:
    agent = define_agent(
        "typed",
        "t",
        llm=ScriptedModel(lambda m: ScriptedTurn(text=text), delay=(0, 0)),
        output_schema=Answer,
        register=False,
    )
    handle, outcome = await run(streams, agent, "go")
    assert outcome.status == status
    outputs = [c for c, _ in await streams.get_all_chunks(handle.session_id) if isinstance(c, OutputChunk)]
    if status == "completed":
        assert outcome.output == {"answer": 42} and outputs[0].output == {"answer": 42}
        assert (await streams.get_stream_info(handle.session_id)).output == {"answer": 42}  # type: ignore[union-attr]
    else:
        assert outcome.error_code == "output_validation_failed" and not outputs


async def test_unknown_agent_is_a_typed_error(streams: StreamManager) -> None:
    with pytest.raises(UnknownAgentError):
        await InProcessExecutor(DjangoStateStore(), streams).execute("no-such-agent", "hi")


async def test_one_run_at_a_time_and_stop(streams: StreamManager, settings: Any) -> None:
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "20"}
    executor = InProcessExecutor(DjangoStateStore(), streams)
    handle = await executor.execute("research", "A long question")
    with pytest.raises(RunConflictError):
        await executor.execute("chat", "Another", session_id=handle.session_id)
    await asyncio.sleep(0.5)
    assert await DjangoStateStore().request_stop(handle.session_id)
    outcome = await handle.result(timeout=10)
    assert outcome.status == "interrupted"
    chunks = [c for c, _ in await streams.get_all_chunks(handle.session_id)]
    assert isinstance(chunks[-1], RunInterrupted)
    assert (await Run.objects.aget(pk=handle.run_id)).status == "interrupted"
    assert (await streams.get_stream_info(handle.session_id)).status == "ended"  # type: ignore[union-attr]
    _, outcome = await run(streams, "chat", "Resume please", session_id=handle.session_id)
    assert outcome.status == "completed"
