"""Keep-alives come from the reader: ``batches(keep_alive=…)`` yields an empty batch once the stream
has sent nothing for that long (the per-loop reader watchdog sees to it), which the SSE bodies send
as a comment. A stream that keeps sending never gets one, and nothing is lost around one."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from typing import Any

import pytest

from streams.backends import InMemoryStreamManager, RedisStreamManager, StreamManager
from streams.protocol import TextDelta
from streams.sse import KEEP_ALIVE, wire_events

TICK = 0.05  # the watchdog's tick in these tests (a second in production)


@pytest.fixture(autouse=True)
def quick_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streams.backends.readers.RECHECK_SECONDS", TICK)


@pytest.fixture(params=["memory", "redis"])
async def manager(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        yield InMemoryStreamManager()
        return
    store = RedisStreamManager(request.getfixturevalue("redis_url"), key_prefix=f"ka:{uuid.uuid4().hex[:8]}:")
    yield store
    await store.aclose()


def delta(text: str) -> TextDelta:
    return TextDelta(delta=text, agent_id="run-1", timestamp=1)


def text(chunk: Any) -> str:
    assert isinstance(chunk, TextDelta)
    return chunk.delta


async def test_an_idle_stream_gets_keep_alives_and_then_its_chunks(manager: StreamManager) -> None:
    writer = await manager.create_writer("s1", "run-1")
    await writer.write(delta("one"))
    reader = await manager.create_resumable_reader("s1", 0)
    assert reader is not None
    seen: list[tuple[float, list[str]]] = []
    started = time.monotonic()

    async def follow() -> None:
        async for batch in reader.batches(keep_alive=0.3):
            seen.append((time.monotonic() - started, [text(chunk) for chunk, _ in batch]))

    following = asyncio.ensure_future(follow())
    await asyncio.sleep(1.0)
    await writer.write(delta("two"))
    await manager.end_stream("s1")
    await asyncio.wait_for(following, 5)
    texts = [text for _, batch in seen for text in batch]
    assert texts == ["one", "two"]
    keep_alives = [at for at, batch in seen if not batch]
    assert 2 <= len(keep_alives) <= 4, seen  # one per 0.3 s idle in 1 s, give or take a tick
    assert keep_alives[0] >= 0.3 - TICK, seen
    assert all(later - earlier >= 0.3 - TICK for earlier, later in itertools.pairwise(keep_alives))


async def test_a_stream_that_keeps_sending_gets_no_keep_alive(manager: StreamManager) -> None:
    writer = await manager.create_writer("s1", "run-1")
    reader = await manager.create_resumable_reader("s1", 0)
    assert reader is not None

    async def write() -> None:
        for i in range(12):
            await writer.write(delta(str(i)))
            await asyncio.sleep(0.1)
        await manager.end_stream("s1")

    writing = asyncio.ensure_future(write())
    batches = [batch async for batch in reader.batches(keep_alive=0.3)]
    await writing
    assert all(batches), batches
    assert [text(chunk) for batch in batches for chunk, _ in batch] == [str(i) for i in range(12)]


async def test_a_reader_asked_for_no_keep_alive_yields_none(manager: StreamManager) -> None:
    writer = await manager.create_writer("s1", "run-1")
    reader = await manager.create_resumable_reader("s1", 0)
    assert reader is not None
    following = asyncio.ensure_future(asyncio.wait_for(_collect(reader.batches()), 5))
    await asyncio.sleep(0.5)
    await writer.write(delta("late"))
    await manager.end_stream("s1")
    batches = await following
    assert batches and all(batches), batches


async def _collect(batches: Any) -> list[Any]:
    return [batch async for batch in batches]


async def test_the_wire_body_sends_the_keep_alive_comment(manager: StreamManager) -> None:
    writer = await manager.create_writer("s1", "run-1")
    reader = await manager.create_resumable_reader("s1", 0)
    assert reader is not None
    body = wire_events(reader, keep_alive=0.2)
    first = await asyncio.wait_for(anext(body), 2)
    assert first == KEEP_ALIVE
    await writer.write(delta("after"))
    await manager.end_stream("s1")
    rest = b"".join([part async for part in body])
    assert b'"delta":"after"' in rest and rest.endswith(b"\n\n")


async def test_the_ui_message_stream_sends_the_keep_alive_comment(manager: StreamManager) -> None:
    from chat.ai_sdk.sse import ui_message_stream
    from chat.ai_sdk.transformer import StreamTransformer

    writer = await manager.create_writer("s1", "run-1")
    reader = await manager.create_resumable_reader("s1", 0)
    assert reader is not None
    body = ui_message_stream(reader.batches(keep_alive=0.2), StreamTransformer(message_id="m1"))
    assert await asyncio.wait_for(anext(body), 2) == KEEP_ALIVE
    await writer.write(delta("after"))
    await manager.end_stream("s1")
    rest = b"".join([part async for part in body])
    assert b'"delta":"after"' in rest and rest.endswith(b"data: [DONE]\n\n")
