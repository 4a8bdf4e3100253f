"""A session deleted while its run streams, then created again under the same id: the new
session's stream holds its own run's chunks and nothing of the old run, whose worker goes on
writing for a moment (its late chunks, its error, its end) before it notices."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chat.state.cascade import delete_session
from chat.state.store import DjangoStateStore
from streams.backends import StreamManager, get_stream_manager
from streams.messages import StoredMessage
from streams.protocol import ErrorChunk, TextDelta
from workers.exceptions import LLMError, RunErrorCode
from workers.executors import InProcessExecutor, RunHandle
from workers.llm.base import LLM, LLMEvent, TextPiece, ToolDefinition
from workers.runtime.agents import Agent, define_agent
from workers.runtime.persistence import RunOutcome

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["memory", "redis"])
async def streams(request: pytest.FixtureRequest, settings: Any) -> AsyncIterator[StreamManager]:
    """The site's stream store (the one a session's deletion deletes from), of each backend."""
    options: dict[str, Any] = {}
    if request.param == "redis":
        options = {"url": request.getfixturevalue("redis_url"), "key_prefix": f"test:{uuid.uuid4().hex[:10]}:"}
    settings.HELIX = {**settings.HELIX, "STREAMS": {"BACKEND": request.param, "OPTIONS": options}}
    manager = get_stream_manager()
    yield manager
    await manager.aclose()


class Held(LLM):
    """Says ``first``, waits for ``go``, then says ``then`` and, given an ``error``, fails with it."""

    def __init__(self, first: str, go: asyncio.Event, then: str, error: LLMError | None = None) -> None:
        self.first, self.go, self.then, self.error = first, go, then, error

    async def stream(
        self, system_prompt: str, messages: list[StoredMessage], tools: list[ToolDefinition]
    ) -> AsyncIterator[LLMEvent]:
        yield TextPiece(self.first)
        await self.go.wait()
        yield TextPiece(self.then)
        if self.error is not None:
            raise self.error


def held_agent(name: str, first: str, go: asyncio.Event, then: str, error: LLMError | None = None) -> Agent:
    return define_agent(name, "x", llm=Held(first, go, then, error), register=False)


async def until(condition: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + 10
    while not await condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def texts_of(streams: StreamManager, handle: RunHandle) -> list[str]:
    chunks = await streams.get_all_chunks(handle.session_id)
    return [c.delta for c, _ in chunks if isinstance(c, TextDelta) and c.agent_id == handle.run_id]


async def test_a_deleted_sessions_run_writes_nothing_into_the_session_created_again(streams: StreamManager) -> None:
    """Its late words and its error: both epochs are 1 (the new session's runs count from 1 again)."""
    executor = InProcessExecutor(DjangoStateStore(), streams)
    session_id = str(uuid.uuid4())
    old_go, new_go = asyncio.Event(), asyncio.Event()
    down = LLMError("the model is down", RunErrorCode.PROVIDER_OVERLOADED, True)
    old = await executor.execute(held_agent("doomed", "Old", old_go, " late words", down), "first", session_id)
    await until(lambda: texts_of(streams, old), "the old run never streamed")

    assert await sync_to_async(delete_session)(session_id)  # its stream goes once the deletion commits
    assert await streams.get_stream_info(session_id) is None
    new = await executor.execute(held_agent("fresh", "New", new_go, " answer"), "second", session_id)
    await until(lambda: texts_of(streams, new), "the new run never streamed")

    old_go.set()  # the old run's worker has not noticed yet: it writes its last words and its error
    await asyncio.gather(old.result(timeout=10), return_exceptions=True)  # then it finds its row gone
    new_go.set()
    outcome = await new.result(timeout=10)

    assert outcome.status == "completed" and outcome.output == "New answer"
    chunks = [chunk for chunk, _ in await streams.get_all_chunks(session_id)]
    assert {chunk.agent_id for chunk in chunks} == {new.run_id}, [(type(c).__name__, c.agent_id) for c in chunks]
    assert not [chunk for chunk in chunks if isinstance(chunk, ErrorChunk)]
    assert "".join(await texts_of(streams, new)) == "New answer"
    info = await streams.get_stream_info(session_id)
    assert info is not None and (info.status, info.error) == ("ended", None)


class DeletedOnceRecorded(DjangoStateStore):
    """Runs ``meanwhile`` once the outcome of run ``doomed`` is recorded, before its attempt goes
    on to end the stream: the moment a session deleted and created again meets its old run."""

    doomed = ""
    meanwhile: Callable[[], Any]

    async def finish_run(self, run_id: str, outcome: RunOutcome, *, epoch: int | None = None) -> None:
        await super().finish_run(run_id, outcome, epoch=epoch)
        if run_id == self.doomed:
            await self.meanwhile()


async def test_a_run_that_ends_as_its_session_is_deleted_and_created_again_ends_nothing_new(
    streams: StreamManager,
) -> None:
    """Its outcome recorded, the old run's attempt goes on to end the stream: it must not end the
    new session's, which its run is still writing to."""
    store = DeletedOnceRecorded()
    executor = InProcessExecutor(store, streams)
    session_id = str(uuid.uuid4())
    old_go, new_go = asyncio.Event(), asyncio.Event()
    started: list[RunHandle] = []

    async def delete_and_create_again() -> None:
        assert await sync_to_async(delete_session)(session_id)
        started.append(await executor.execute(held_agent("fresh", "New", new_go, " answer"), "second", session_id))
        await until(lambda: texts_of(streams, started[0]), "the new run never streamed")

    store.meanwhile = delete_and_create_again
    old = await executor.execute(held_agent("doomed", "Old", old_go, " answer"), "first", session_id)
    store.doomed = old.run_id
    old_go.set()
    superseded = await old.result(timeout=10)  # its outcome recorded, its stream's end refused
    assert superseded.status == "superseded"
    [new] = started
    new_go.set()
    outcome = await new.result(timeout=10)

    assert outcome.status == "completed" and outcome.output == "New answer"
    chunks = [chunk for chunk, _ in await streams.get_all_chunks(session_id)]
    assert {chunk.agent_id for chunk in chunks} == {new.run_id}, [(type(c).__name__, c.agent_id) for c in chunks]
    info = await streams.get_stream_info(session_id)
    assert info is not None and (info.status, info.output) == ("ended", "New answer")
