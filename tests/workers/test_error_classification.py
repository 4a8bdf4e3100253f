"""How a run's failure becomes a code: the error types, :func:`as_run_error`, and the loop and the
executor recording it. The model adapter's own classification is in ``test_openai_adapter.py``.
No database: the loops run on the in-memory store, the executor on a recorder kept in memory."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.db import OperationalError
from pydantic import BaseModel

from streams.backends import InMemoryStreamManager
from streams.backoff import Backoff
from streams.exceptions import StreamSupersededError, StreamUnavailableError
from streams.messages import StoredMessage
from streams.protocol import Chunk, ErrorChunk, SubAgentStart, ToolEnd
from workers.attempts import execute_run
from workers.exceptions import (
    DATABASE_UNAVAILABLE_TEXT,
    DatabaseUnavailableError,
    LLMError,
    RunError,
    RunErrorCode,
    RunSupersededError,
    StatePatchError,
    UnknownAgentError,
    as_run_error,
)
from workers.leases import LeaseKeeper
from workers.llm.base import LLM, LLMEvent, ToolDefinition
from workers.llm.scripted import ScriptedModel, ScriptedToolCall, ScriptedTurn
from workers.runtime.agents import Agent, define_agent, define_tool
from workers.runtime.persistence import RunClaim, RunOutcome, SessionSnapshot
from workers.runtime.steps import RunLoop


def test_run_error_codes_are_lower_snake_and_named_after_their_value() -> None:
    for code in RunErrorCode:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", code.value) and code.name == code.value.upper()


@pytest.mark.parametrize(
    ("error", "code", "recoverable", "message"),
    [
        (RunError("too long", RunErrorCode.MAX_STEPS_EXCEEDED), "max_steps_exceeded", False, "too long"),
        (LLMError("busy", RunErrorCode.PROVIDER_OVERLOADED, True), "provider_overloaded", True, "busy"),
        (LLMError("odd"), "provider_error", False, "odd"),
        (StatePatchError("no path"), "state_patch_failed", False, "no path"),
        (UnknownAgentError("Unknown agent 'x'"), "unknown_agent", False, "Unknown agent 'x'"),
        (ValueError("boom"), "internal_error", False, "ValueError: boom"),
    ],
)
def test_what_a_run_that_raised_fails_with(error: Exception, code: str, recoverable: bool, message: str) -> None:
    failure = as_run_error(error)
    assert (failure.code, failure.recoverable, failure.message) == (code, recoverable, message)
    assert isinstance(failure.code, RunErrorCode)
    if isinstance(error, RunError):
        assert failure is error


def test_a_run_error_takes_only_known_codes() -> None:
    assert RunError("x", "worker_lost").code is RunErrorCode.WORKER_LOST  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RunError("x", "WORKER_LOST")  # type: ignore[arg-type]


def test_a_superseded_run_is_a_superseded_stream_with_its_code() -> None:
    error = RunSupersededError("session-1", "run-1", 1, 2)
    assert isinstance(error, StreamSupersededError)
    assert (error.code, error.status_code) == ("EXECUTOR_SUPERSEDED", 409)
    assert (error.stream_id, error.run_id, error.epoch, error.current_epoch) == ("session-1", "run-1", 1, 2)
    assert str(error) == "Run run-1 is held by epoch 2, not 1"


class Raising(LLM):
    """A model whose call raises ``error`` before its first event."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def stream(
        self, system_prompt: str, messages: list[StoredMessage], tools: list[ToolDefinition]
    ) -> AsyncIterator[LLMEvent]:
        raise self.error
        yield  # an async generator


async def run_loop(agent: Agent) -> tuple[RunOutcome, list[Chunk]]:
    """Run ``agent`` as a run of its own on the in-memory store, with nothing recorded."""
    streams = InMemoryStreamManager()
    loop = RunLoop(agent, session_id="session-1", run_id="run-1", streams=streams, recorder=None)
    outcome = await loop.run(messages=[StoredMessage(role="user", content="go")], state={})
    return outcome, [chunk for chunk, _ in await streams.get_all_chunks("session-1")]


@pytest.mark.parametrize(
    ("error", "code", "recoverable"),
    [
        (RuntimeError("a bug"), "internal_error", False),
        (LLMError("refused", RunErrorCode.PROVIDER_AUTH), "provider_auth", False),
        (LLMError("429", RunErrorCode.PROVIDER_RATE_LIMITED, True), "provider_rate_limited", True),
    ],
)
async def test_the_loop_records_a_failure_with_its_code(error: Exception, code: str, recoverable: bool) -> None:
    outcome, chunks = await run_loop(define_agent("failing", "x", llm=Raising(error), register=False))
    assert (outcome.status, outcome.error_code) == ("failed", code)
    [chunk] = [c for c in chunks if isinstance(c, ErrorChunk)]
    assert (chunk.code, chunk.recoverable, chunk.error, chunk.step) == (code, recoverable, outcome.error_message, 1)
    assert (chunk.agent_id, chunk.agent_type) == ("run-1", "failing")


class Where(BaseModel):
    city: str = ""


def delegate(messages: list[StoredMessage]) -> ScriptedTurn:
    if messages[-1].role == "tool":
        return ScriptedTurn(text=f"The helper said: {messages[-1].content}")
    return ScriptedTurn(tool_calls=[ScriptedToolCall("helper", {"task": "find the user"})])


@pytest.mark.parametrize(
    ("child_llm", "code"),
    [
        (
            ScriptedModel(lambda m: ScriptedTurn(tool_calls=[ScriptedToolCall("locate", {})]), delay=(0, 0)),
            "unsupported_pause",
        ),
        (Raising(LLMError("down", RunErrorCode.PROVIDER_UNAVAILABLE, True)), "provider_unavailable"),
    ],
)
async def test_a_failed_sub_agent_fails_its_tool_call_not_the_run(child_llm: Any, code: str) -> None:
    locate = define_tool("locate", "Where the user is (runs in the browser).", Where)
    helper = define_agent("helper", "x", tools=[locate], llm=child_llm, register=False)
    parent = define_agent("parent", "x", tools=[helper], llm=ScriptedModel(delegate, delay=(0, 0)), register=False)
    outcome, chunks = await run_loop(parent)
    assert outcome.status == "completed"
    [start] = [c for c in chunks if isinstance(c, SubAgentStart)]
    [child_error] = [c for c in chunks if isinstance(c, ErrorChunk)]
    assert (child_error.agent_id, child_error.code) == (start.sub_session_id, code)
    [end] = [c for c in chunks if isinstance(c, ToolEnd)]
    assert (end.tool_call_id, end.success, end.error) == (start.call_id, False, child_error.error)
    assert outcome.output == f"The helper said: {child_error.error}"


class OneClaim:
    """A recorder holding one claimable run of an agent no worker has registered."""

    def __init__(self) -> None:
        self.finished: list[tuple[RunOutcome, int | None]] = []

    async def claim_run(self, run_id: str, worker: str, lease_seconds: float, **_: object) -> RunClaim:
        return RunClaim(
            run_id, "session-1", "retired-agent", "msg-1", epoch=1, attempt=1, step_count=0, start_sequence=0
        )

    async def renew_leases(self, worker: str, run_ids: list[str], lease_seconds: float) -> set[str]:
        return set(run_ids)

    async def finish_run(self, run_id: str, outcome: RunOutcome, *, epoch: int | None = None) -> None:
        self.finished.append((outcome, epoch))


async def test_a_run_of_an_unregistered_agent_fails_as_unknown_agent() -> None:
    recorder, streams = OneClaim(), InMemoryStreamManager()
    await streams.create_writer("session-1", "run-1")
    keeper = LeaseKeeper(recorder, lease_seconds=30, heartbeat_seconds=0.01)  # type: ignore[arg-type]
    attempt = asyncio.ensure_future(execute_run(recorder, streams, "run-1", keeper))  # type: ignore[arg-type]
    outcome = await attempt
    assert outcome is not None and (outcome.status, outcome.error_code) == ("failed", "unknown_agent")
    assert "retired-agent" in outcome.error_message
    assert recorder.finished == [(outcome, 1)]
    [chunk] = [c for c, _ in await streams.get_all_chunks("session-1") if isinstance(c, ErrorChunk)]
    assert (chunk.code, chunk.recoverable, chunk.step, chunk.agent_type) == ("unknown_agent", False, 0, "retired-agent")
    info = await streams.get_stream_info("session-1")
    assert info is not None and info.status == "failed"


class DatabaseGoesAway(OneClaim):
    """A recorder whose database stops answering when the first step is saved, and comes back
    after ``finish_failures`` failed attempts to record the outcome (never, when ``None``)."""

    def __init__(self, streams: InMemoryStreamManager, finish_failures: int | None) -> None:
        super().__init__()
        self.streams = streams
        self.finish_failures = finish_failures
        self.errors_seen_while_unrecorded: list[int] = []

    async def claim_run(self, run_id: str, worker: str, lease_seconds: float, **_: object) -> RunClaim:
        return RunClaim(run_id, "session-1", "talker", "msg-1", epoch=1, attempt=1, step_count=0, start_sequence=0)

    async def load_session(self, session_id: str) -> SessionSnapshot:
        return SessionSnapshot(session_id, "talker", [StoredMessage(role="user", content="Hi")], {})

    async def resolved_calls(self, run_id: str) -> list[object]:
        return []

    async def run_status(self, run_id: str) -> str:
        return "running"

    async def commit_step(self, *args: object, **kwargs: object) -> tuple[str, int]:
        raise DatabaseUnavailableError() from OperationalError("database is locked")

    async def finish_run(self, run_id: str, outcome: RunOutcome, *, epoch: int | None = None) -> None:
        chunks = await self.streams.get_all_chunks("session-1")
        self.errors_seen_while_unrecorded.append(sum(isinstance(c, ErrorChunk) for c, _ in chunks))
        if self.finish_failures is None or self.finish_failures > 0:
            if self.finish_failures is not None:
                self.finish_failures -= 1
            raise DatabaseUnavailableError()
        await super().finish_run(run_id, outcome, epoch=epoch)


TALKER = define_agent(
    "talker", "x", llm=ScriptedModel(lambda m: ScriptedTurn(text="Half an answer"), delay=(0, 0)), register=False
)


async def test_a_run_the_database_fails_is_recorded_failed_before_its_stream_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("workers.attempts.RECORD_PATIENCE", 5.0)
    streams = InMemoryStreamManager()
    recorder = DatabaseGoesAway(streams, finish_failures=2)
    await streams.create_writer("session-1", "run-1")
    keeper = LeaseKeeper(recorder, lease_seconds=30, heartbeat_seconds=0.01)  # type: ignore[arg-type]
    outcome = await execute_run(recorder, streams, "run-1", keeper, TALKER)  # type: ignore[arg-type]
    assert outcome is not None and (outcome.status, outcome.error_code) == ("failed", "database_unavailable")
    assert outcome.error_message == DATABASE_UNAVAILABLE_TEXT and "locked" not in outcome.error_message
    assert recorder.errors_seen_while_unrecorded == [0, 0, 0]  # no error in the stream until recorded
    assert [o for o, _ in recorder.finished] == [outcome]
    [chunk] = [c for c, _ in await streams.get_all_chunks("session-1") if isinstance(c, ErrorChunk)]
    assert (chunk.code, chunk.recoverable, chunk.step, chunk.error) == (
        "database_unavailable",
        True,
        1,
        DATABASE_UNAVAILABLE_TEXT,
    )
    info = await streams.get_stream_info("session-1")
    assert info is not None and info.status == "failed"


async def test_a_run_whose_failure_cannot_be_recorded_leaves_its_stream_to_the_next_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("workers.attempts.RECORD_PATIENCE", 2.0)
    streams = InMemoryStreamManager()
    recorder = DatabaseGoesAway(streams, finish_failures=None)
    await streams.create_writer("session-1", "run-1")
    keeper = LeaseKeeper(recorder, lease_seconds=30, heartbeat_seconds=0.01)  # type: ignore[arg-type]
    assert await execute_run(recorder, streams, "run-1", keeper, TALKER) is None  # type: ignore[arg-type]
    assert len(recorder.errors_seen_while_unrecorded) >= 2 and recorder.finished == []
    chunks = [c for c, _ in await streams.get_all_chunks("session-1")]
    assert not any(isinstance(c, ErrorChunk) for c in chunks)
    info = await streams.get_stream_info("session-1")
    assert info is not None and info.status == "active"  # a takeover continues it


class StoreAwayAtTheEnd(InMemoryStreamManager):
    """A stream store that is unreachable (past its retry window) for the first ``failures``
    writes that fail a stream."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def fail_stream(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise StreamUnavailableError("session-1", "Redis unreachable")
        return await super().fail_stream(*args, **kwargs)


async def test_the_end_of_a_recorded_runs_stream_is_written_once_the_store_is_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run's failure is recorded, then the store refuses the stream's end: its readers would
    wait for good. The worker writes that end once the store answers, and the error only once."""
    monkeypatch.setattr("workers.attempts.Backoff", lambda **_: Backoff(initial=0.01, cap=0.02, timeout=5))
    streams = StoreAwayAtTheEnd(failures=3)
    recorder = DatabaseGoesAway(streams, finish_failures=0)
    await streams.create_writer("session-1", "run-1")
    keeper = LeaseKeeper(recorder, lease_seconds=30, heartbeat_seconds=0.01)  # type: ignore[arg-type]
    outcome = await execute_run(recorder, streams, "run-1", keeper, TALKER)  # type: ignore[arg-type]
    assert outcome is not None and outcome.error_code == "database_unavailable"
    assert [o for o, _ in recorder.finished] == [outcome]
    for _ in range(200):
        info = await streams.get_stream_info("session-1")
        if info is not None and info.status != "active":
            break
        await asyncio.sleep(0.01)
    assert info is not None and info.status == "failed" and streams.failures == 0
    errors = [c for c, _ in await streams.get_all_chunks("session-1") if isinstance(c, ErrorChunk)]
    assert [e.code for e in errors] == ["database_unavailable"]
