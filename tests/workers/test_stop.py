"""Stop: a user's stop halts the run wherever it waits — a tool, a stalled model, a sub-agent —
within the lease keeper's stop poll, keeps what was streamed, and ends the stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from chat.models import Message, Run
from chat.state.store import DjangoStateStore
from streams.backends import InMemoryStreamManager
from streams.messages import StoredMessage
from streams.protocol import RunInterrupted, TextDelta, ToolStart
from workers.executors import InProcessExecutor
from workers.leases import STOP_POLL_SECONDS
from workers.llm.base import LLM, LLMEvent, TextPiece, ToolDefinition
from workers.llm.scripted import ScriptedModel, ScriptedToolCall, ScriptedTurn
from workers.runtime.agents import Agent, define_agent, define_tool

pytestmark = pytest.mark.django_db(transaction=True)


class Nothing(BaseModel):
    pass


class Stalls(LLM):
    """A model that says one word, then never says another."""

    async def stream(
        self, system_prompt: str, messages: list[StoredMessage], tools: list[ToolDefinition]
    ) -> AsyncIterator[LLMEvent]:
        yield TextPiece("Thinking")
        await asyncio.sleep(3600)


def calls(tool: str, arguments: dict[str, Any] | None = None) -> ScriptedModel:
    def turn(messages: list[StoredMessage]) -> ScriptedTurn:
        if messages[-1].role == "tool":
            return ScriptedTurn(text="Done.")
        return ScriptedTurn(text="Let me look. ", tool_calls=[ScriptedToolCall(tool, arguments or {})])

    return ScriptedModel(turn, delay=(0, 0))


def slow_tool_agent(cancelled: list[bool]) -> Agent:
    async def lookup(_: Nothing, __: Any) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    tool = define_tool("lookup", "Looks something up, slowly.", Nothing, lookup)
    return define_agent("slow-tool", "x", tools=[tool], llm=calls("lookup"), register=False)


def sub_agent_parent() -> Agent:
    child = define_agent("stalling-child", "x", llm=Stalls(), register=False, description="A helper.")
    return define_agent("parent", "x", tools=[child], llm=calls("stalling-child", {"task": "look"}), register=False)


async def stored_replies(run: Run) -> list[str]:
    query = Message.objects.filter(session_id=run.session_id, role="assistant").order_by("position")
    return [m.content async for m in query if not m.tool_calls]


async def stop_while(agent: Agent, reached: type[Any]) -> tuple[float, list[Any], Any]:
    """Start ``agent``, stop its run once a ``reached`` chunk is out; the seconds from the stop to
    the run's end, the chunks, the run."""
    store, streams = DjangoStateStore(), InMemoryStreamManager()
    handle = await InProcessExecutor(store, streams).execute(agent, "go")
    deadline = time.monotonic() + 10
    while not any(isinstance(c, reached) for c, _ in await streams.get_all_chunks(handle.session_id)):
        assert time.monotonic() < deadline, f"the run never reached {reached.__name__}"
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)  # well inside the wait
    stopped_at = time.monotonic()
    assert await store.request_stop(handle.session_id)
    outcome = await handle.result(timeout=10)
    took = time.monotonic() - stopped_at
    assert outcome.status == "interrupted"
    chunks = [c for c, _ in await streams.get_all_chunks(handle.session_id)]
    info = await streams.get_stream_info(handle.session_id)
    assert info is not None and info.status == "ended"  # every open stream of the run ends
    return took, chunks, await Run.objects.aget(pk=handle.run_id)


async def test_a_stop_ends_a_tool_mid_call() -> None:
    cancelled: list[bool] = []
    took, chunks, run = await stop_while(slow_tool_agent(cancelled), ToolStart)
    assert cancelled == [True] and took < STOP_POLL_SECONDS + 0.75
    assert isinstance(chunks[-1], RunInterrupted) and chunks[-1].reason == "user_stop"
    assert "".join(c.delta for c in chunks if isinstance(c, TextDelta)) == "Let me look. "
    assert run.status == "interrupted"
    assert await stored_replies(run) == ["Let me look. "]  # what was streamed is kept, its call is not


async def test_a_stop_ends_a_stalled_model_call() -> None:
    agent = define_agent("stalls", "x", llm=Stalls(), register=False)
    took, chunks, run = await stop_while(agent, TextDelta)
    assert took < STOP_POLL_SECONDS + 0.75 and isinstance(chunks[-1], RunInterrupted)
    assert await stored_replies(run) == ["Thinking"]


async def test_a_stop_reaches_through_a_sub_agent_to_the_root_run() -> None:
    took, chunks, run = await stop_while(sub_agent_parent(), ToolStart)
    assert took < STOP_POLL_SECONDS + 0.75
    assert [c.agent_id for c in chunks if isinstance(c, RunInterrupted)] == [str(run.pk)]
