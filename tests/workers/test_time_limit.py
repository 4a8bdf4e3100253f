"""The run time limit: an attempt past it fails the run ``time_limit_exceeded``, fenced by its epoch,
so a frozen attempt whose run was taken over meanwhile changes nothing when its limit strikes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from chat.models import Run
from chat.state.store import DjangoStateStore
from streams.backends import InMemoryStreamManager
from streams.messages import StoredMessage
from streams.protocol import ErrorChunk, StreamResync
from workers.attempts import execute_run
from workers.executors import start_run
from workers.leases import LeaseKeeper
from workers.llm.scripted import ScriptedModel, ScriptedToolCall, ScriptedTurn
from workers.runtime.agents import Agent, define_agent, define_tool

pytestmark = pytest.mark.django_db(transaction=True)


class Nothing(BaseModel):
    pass


def slow_agent(hangs: int) -> Agent:
    """An agent whose tool hangs on its first ``hangs`` calls (a frozen worker), then answers."""
    calls = {"n": 0}

    async def lookup(_: Nothing, __: Any) -> str:
        calls["n"] += 1
        if calls["n"] <= hangs:
            await asyncio.sleep(60)
        return "found"

    def turn(messages: list[StoredMessage]) -> ScriptedTurn:
        if messages[-1].role == "tool":
            return ScriptedTurn(text="Done.")
        return ScriptedTurn(tool_calls=[ScriptedToolCall("lookup", {})])

    tool = define_tool("lookup", "Looks something up.", Nothing, lookup)
    return define_agent("slow", "x", tools=[tool], llm=ScriptedModel(turn, delay=(0, 0)), register=False)


def keeper(store: DjangoStateStore, worker: str, lease: float) -> LeaseKeeper:
    # A heartbeat that never comes in time: the worker is frozen as far as its lease goes.
    return LeaseKeeper(store, lease_seconds=lease, heartbeat_seconds=600, worker=worker)


async def test_a_run_past_its_time_limit_fails_with_the_code() -> None:
    store, streams = DjangoStateStore(), InMemoryStreamManager()
    agent = slow_agent(hangs=1)
    handle = await start_run(store, streams, agent, "go")
    outcome = await execute_run(store, streams, handle.run_id, keeper(store, "w1", 30), agent, time_limit=0.5)
    assert outcome is not None and (outcome.status, outcome.error_code) == ("failed", "time_limit_exceeded")
    run = await Run.objects.aget(pk=handle.run_id)
    assert (run.status, run.error_code) == ("failed", "time_limit_exceeded")
    [error] = [c for c, _ in await streams.get_all_chunks(handle.session_id) if isinstance(c, ErrorChunk)]
    assert (error.code, error.recoverable) == ("time_limit_exceeded", False)
    info = await streams.get_stream_info(handle.session_id)
    assert info is not None and info.status == "failed"


async def test_a_frozen_attempt_past_its_limit_after_a_takeover_changes_nothing() -> None:
    store, streams = DjangoStateStore(), InMemoryStreamManager()
    agent = slow_agent(hangs=1)
    handle = await start_run(store, streams, agent, "go")
    frozen = asyncio.ensure_future(
        execute_run(store, streams, handle.run_id, keeper(store, "frozen", 0.3), agent, time_limit=2.0)
    )
    await asyncio.sleep(0.6)  # the frozen attempt's lease has expired
    outcome = await execute_run(store, streams, handle.run_id, keeper(store, "alive", 30), agent)
    assert outcome is not None and outcome.status == "completed"
    chunks = [c for c, _ in await streams.get_all_chunks(handle.session_id)]
    assert sum(isinstance(c, StreamResync) for c in chunks) == 1  # the takeover happened

    assert await frozen is None  # its time limit struck, and every write of it was fenced off
    run = await Run.objects.aget(pk=handle.run_id)
    assert (run.status, run.error_code, run.epoch) == ("completed", "", 2)
    assert [c for c, _ in await streams.get_all_chunks(handle.session_id)] == chunks  # nothing added
    assert not any(isinstance(c, ErrorChunk) for c in chunks)
    info = await streams.get_stream_info(handle.session_id)
    assert info is not None and info.status == "ended"


def test_the_tasks_take_their_queue_and_limits_from_the_settings_in_force() -> None:
    """Read when Celery uses them, not when ``chat.tasks`` is imported: a site that sets them in
    settings loaded after the app (or a test overriding them) is obeyed."""
    from django.test import override_settings

    from chat.tasks import reap_runs, run_agent

    with override_settings(HELIX={"CELERY_QUEUE": "agents", "RUN_TIME_LIMIT_SECONDS": 90}):
        assert (run_agent.queue, reap_runs.queue) == ("agents", "agents")
        assert (run_agent.soft_time_limit, run_agent.time_limit) == (90, 150)
    with override_settings(HELIX={"CELERY_QUEUE": "chat", "RUN_TIME_LIMIT_SECONDS": 30}):
        assert run_agent.queue == "chat" and run_agent.soft_time_limit == 30
