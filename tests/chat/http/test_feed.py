"""A session's feed: one event stream per tab that says when the session's run starts, pauses,
goes on, ends or fails, on both stores; and the endpoint's gates."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.test import AsyncClient

from chat.http import feed
from streams.backends import InMemoryStreamManager, RedisStreamManager
from streams.backends.base import StreamManager
from streams.protocol import TextDelta
from tests.chat.http.requests import login, post, read_events, ui_body


@pytest.fixture(params=["memory", "redis"])
async def streams(request: pytest.FixtureRequest) -> AsyncIterator[StreamManager]:
    if request.param == "memory":
        yield InMemoryStreamManager()
        return
    store = RedisStreamManager(request.getfixturevalue("redis_url"), key_prefix=f"feed:{uuid.uuid4().hex[:8]}:")
    yield store
    await store.aclose()


class Listener:
    """A feed being read, its ``run`` events collected as they come."""

    def __init__(self, body: AsyncIterator[bytes]) -> None:
        self.body = body
        self.events: list[dict[str, Any]] = []
        self.keep_alives = 0
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for part in self.body:
            if part.startswith(b": keep-alive"):
                self.keep_alives += 1
            for block in part.decode().split("\n\n"):
                if block.startswith("event: run\n"):
                    self.events.append(json.loads(block.split("data: ", 1)[1]))

    async def until(self, count: int, seconds: float = 3.0) -> list[tuple[str, str | None]]:
        """The (status, run) of the first ``count`` events, once that many have come."""
        async with asyncio.timeout(seconds):
            while len(self.events) < count:
                await asyncio.sleep(0.01)
        return [(e["status"], e["runId"]) for e in self.events]

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.body.aclose()  # type: ignore[attr-defined]


async def write(streams: StreamManager, session: str, run: str, text: str) -> None:
    writer = await streams.create_writer(session, run)
    await writer.write(TextDelta(delta=text, agent_id=run, timestamp=1))
    await writer.flush()


async def test_the_feed_follows_runs_as_they_start_pause_go_on_and_end(streams: StreamManager) -> None:
    session = f"s-{uuid.uuid4().hex[:8]}"
    await streams.open_stream(session, "run-1")
    await write(streams, session, "run-1", "hello")
    listener = Listener(feed.session_feed(streams, session, keep_alive=60))
    try:
        assert await listener.until(1) == [("active", "run-1")]
        for token in range(20):  # tokens are not news: the feed reads the state, not the chunks
            await write(streams, session, "run-1", f"t{token}")
        await streams.pause_stream(session)
        assert await listener.until(2) == [("active", "run-1"), ("paused", "run-1")]
        await streams.resume_stream(session)  # an approval answered in another tab
        await write(streams, session, "run-1", "sent")
        await listener.until(3)
        await streams.end_stream(session)
        await listener.until(4)
        await streams.open_stream(session, "run-2")  # the session's next run, from anywhere
        await write(streams, session, "run-2", "again")
        seen = await listener.until(5)
        assert seen == [
            ("active", "run-1"),
            ("paused", "run-1"),
            ("active", "run-1"),
            ("ended", "run-1"),
            ("active", "run-2"),
        ]
        assert listener.events[-1]["streamSequence"] in (22, 23)  # run-1's 22 chunks, then maybe run-2's first
    finally:
        await listener.close()


async def test_a_feed_of_a_session_without_a_stream_says_so_and_keeps_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    streams = InMemoryStreamManager()
    monkeypatch.setattr(feed, "RECHECK_SECONDS", 0.05)
    listener = Listener(feed.session_feed(streams, "nothing-yet", keep_alive=0.05))
    try:
        assert await listener.until(1) == [("none", None)]
        await streams.open_stream("nothing-yet", "run-1")  # heard by the recheck: no stream to watch before
        assert await listener.until(2) == [("none", None), ("active", "run-1")]
        await asyncio.sleep(0.3)
        assert listener.keep_alives >= 1
    finally:
        await listener.close()


@pytest.mark.django_db(transaction=True)
async def test_only_the_owner_reads_a_sessions_feed(settings: Any) -> None:
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "0"}
    alice, bob = await login(f"alice-{uuid.uuid4().hex[:6]}"), await login(f"bob-{uuid.uuid4().hex[:6]}")
    session = str(uuid.uuid4())
    await read_events(await post(alice, session, ui_body("Hello", session)))
    for client, status in ((bob, 404), (AsyncClient(), 401)):
        response = await client.get(f"/api/chat/{session}/feed")
        assert response.status_code == status, response.content
        assert response.json()["code"] in ("SESSION_NOT_FOUND", "NOT_AUTHENTICATED")
    assert (await alice.get(f"/api/chat/{uuid.uuid4()}/feed")).status_code == 404  # no such session
    response = await alice.get(f"/api/chat/{session}/feed")
    assert response.status_code == 200 and response["content-type"] == "text/event-stream"
    body = response.streaming_content  # type: ignore[attr-defined]
    first = b""
    async with asyncio.timeout(5):
        while b"event: run" not in first:
            first += await anext(body)
    assert b'"status":"ended"' in first
    await body.aclose()
