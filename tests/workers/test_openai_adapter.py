"""The OpenAI-compatible adapter against a local server streaming real chat-completion SSE."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from chat.models import Run
from chat.state.store import DjangoStateStore
from streams.backends import InMemoryStreamManager
from streams.messages import StoredMessage, ToolCall
from streams.protocol import ErrorChunk, TextDelta, Thinking, ToolArgStreamDelta, ToolEnd
from tests.workers.fake_openai import FakeOpenAI, completion_chunks
from workers.exceptions import LLMError, RunErrorCode
from workers.executors import InProcessExecutor
from workers.llm.base import (
    ReasoningDelta,
    TextPiece,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolDefinition,
    Usage,
)
from workers.llm.openai import OpenAIChatModel, classify_error, to_openai_messages
from workers.runtime.agents import define_agent, define_tool


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI().running() as server:
        yield server


def model(fake: FakeOpenAI, **options: object) -> OpenAIChatModel:
    return OpenAIChatModel("fake-model", base_url=fake.base_url, api_key="sk-test", backoff=0.01, **options)  # type: ignore[arg-type]


TOOL = ToolDefinition("search", "Search.", {"type": "object", "properties": {"q": {"type": "string"}}})


async def test_streams_reasoning_text_tool_calls_and_usage(fake: FakeOpenAI) -> None:
    fake.respond(
        completion_chunks(
            reasoning=["Let me ", "think."],
            content=["Hel", "lo"],
            tool_calls=[("call_a", "search", ['{"q":', '"django"}']), ("call_b", "search", ["{}"])],
        )
    )
    events = [
        event async for event in model(fake).stream("Be brief.", [StoredMessage(role="user", content="hi")], [TOOL])
    ]
    assert events == [
        ReasoningDelta("Let me "),
        ReasoningDelta("think."),
        TextPiece("Hel"),
        TextPiece("lo"),
        ToolCallStart("call_a", "search"),
        ToolCallDelta("call_a", '{"q":'),
        ToolCallDelta("call_a", '"django"}'),
        ToolCallStart("call_b", "search"),
        ToolCallDelta("call_b", "{}"),
        Usage(prompt_tokens=11, completion_tokens=7),
        ToolCallEnd("call_a", "search", '{"q":"django"}'),
        ToolCallEnd("call_b", "search", "{}"),
    ]
    [request] = fake.requests
    assert request["auth"] == "Bearer sk-test"
    body = request["body"]
    assert (
        body["model"] == "fake-model" and body["stream"] is True and body["stream_options"] == {"include_usage": True}
    )
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert body["tools"][0]["function"]["name"] == "search"


async def test_rate_limits_and_overload_are_retried_with_backoff(fake: FakeOpenAI) -> None:
    fake.respond(429, 503, completion_chunks(content=["ok"]))
    events = [
        event async for event in model(fake, max_retries=3).stream("", [StoredMessage(role="user", content="hi")], [])
    ]
    assert TextPiece("ok") in events and len(fake.requests) == 3


@pytest.mark.parametrize(
    ("statuses", "code", "recoverable", "attempts"),
    [
        ([429, 429, 429], "provider_rate_limited", True, 3),
        ([500, 502, 503], "provider_overloaded", True, 3),
        ([400], "provider_bad_request", False, 1),
        ([401], "provider_auth", False, 1),
        ([403], "provider_auth", False, 1),
    ],
)
async def test_errors_are_classified(
    fake: FakeOpenAI, statuses: list[int], code: str, recoverable: bool, attempts: int
) -> None:
    fake.respond(*statuses)
    with pytest.raises(LLMError) as info:
        [event async for event in model(fake, max_retries=2).stream("", [StoredMessage(role="user", content="hi")], [])]
    assert (info.value.code, info.value.recoverable) == (code, recoverable)
    assert len(fake.requests) == attempts


async def test_an_unreachable_provider_is_retried_then_classified() -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    adapter = OpenAIChatModel("fake-model", base_url=url, api_key="sk-test", backoff=0.01, max_retries=1)
    with pytest.raises(LLMError) as info:
        [event async for event in adapter.stream("", [StoredMessage(role="user", content="hi")], [])]
    assert (info.value.code, info.value.recoverable) == (RunErrorCode.PROVIDER_UNAVAILABLE, True)


def test_an_unexpected_failure_is_a_provider_error_and_a_classified_one_stays_as_it_is() -> None:
    unexpected = classify_error(KeyError("choices"))
    assert (unexpected.code, unexpected.recoverable) == (RunErrorCode.PROVIDER_ERROR, False)
    assert unexpected.message == "The model provider failed: KeyError: 'choices'"
    error = LLMError("script called unknown tool 'x'", RunErrorCode.INVALID_RESPONSE)
    assert classify_error(error) is error


def test_history_becomes_chat_completion_messages() -> None:
    history = [
        StoredMessage(role="user", content="6*7?"),
        StoredMessage(role="assistant", content="", tool_calls=[ToolCall(id="c1", name="calc", arguments={"a": 6})]),
        StoredMessage(role="tool", tool_call_id="c1", content="42"),
        StoredMessage(role="assistant", content="42.", tool_calls=[ToolCall(id="c2", name="calc", arguments="{bad")]),
    ]
    assert to_openai_messages("sys", history) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "6*7?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"a": 6}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {
            "role": "assistant",
            "content": "42.",
            "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "calc", "arguments": "{bad"}}],
        },
    ]


class Query(BaseModel):
    q: str


@pytest.mark.django_db(transaction=True)
async def test_an_agent_on_the_openai_adapter_end_to_end(fake: FakeOpenAI) -> None:
    fake.respond(
        completion_chunks(reasoning=["Searching."], tool_calls=[("call_1", "search", ['{"q": "dj', 'ango"}'])]),
        completion_chunks(content=["Django ", "is ", "a ", "framework."]),
    )
    agent = define_agent(
        "openai-agent",
        "You search.",
        tools=[define_tool("search", "Search.", Query, lambda args, context: {"hits": [args.q.upper()]})],
        llm=model(fake),
        register=False,
    )
    streams = InMemoryStreamManager()
    handle = await InProcessExecutor(DjangoStateStore(), streams).execute(agent, "What is django?")
    outcome = await handle.result(timeout=20)
    assert outcome.status == "completed" and outcome.output == "Django is a framework."
    assert outcome.usage == {"prompt_tokens": 22, "completion_tokens": 14}
    chunks = [chunk for chunk, _ in await streams.get_all_chunks(handle.session_id)]
    assert [c.delta for c in chunks if isinstance(c, ToolArgStreamDelta)] == ['{"q": "dj', 'ango"}']
    assert [c.result for c in chunks if isinstance(c, ToolEnd)] == [{"hits": ["DJANGO"]}]
    assert any(isinstance(c, Thinking) for c in chunks) and any(isinstance(c, TextDelta) for c in chunks)
    second = fake.requests[1]["body"]["messages"]
    assert second[-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": json.dumps({"hits": ["DJANGO"]}, separators=(",", ":")),
    }


@pytest.mark.django_db(transaction=True)
async def test_a_provider_outage_fails_the_run_with_a_recorded_error(fake: FakeOpenAI) -> None:
    fake.respond(503, 503)
    agent = define_agent("down", "x", llm=model(fake, max_retries=1), register=False)
    streams = InMemoryStreamManager()
    handle = await InProcessExecutor(DjangoStateStore(), streams).execute(agent, "hi")
    outcome = await handle.result(timeout=20)
    assert (outcome.status, outcome.error_code) == ("failed", "provider_overloaded")
    errors = [c for c, _ in await streams.get_all_chunks(handle.session_id) if isinstance(c, ErrorChunk)]
    assert errors[0].recoverable is True and errors[0].code == "provider_overloaded"
    assert (await Run.objects.aget(pk=handle.run_id)).error_code == "provider_overloaded"
