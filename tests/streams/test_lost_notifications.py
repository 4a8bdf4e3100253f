"""A reader never waits for good on a notification that was lost: it reads the store again after
``RECHECK_SECONDS`` of silence, so a stream that ended, failed or vanished still closes."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from streams.backends import InMemoryStreamManager, RedisStreamManager, StreamManager
from streams.backends.readers import ResumableStreamReader, Subscription
from streams.exceptions import StreamNotFoundError
from streams.protocol import TextDelta


class Deaf(Subscription):
    """A subscription whose notifications are all lost (only the watchdog's nudges wake it)."""

    def __init__(self) -> None:
        self._nudged = asyncio.Event()

    async def ready(self) -> None:
        return None

    async def wait(self) -> None:
        await self._nudged.wait()
        self._nudged.clear()

    def close(self) -> None:
        return None

    def nudge(self) -> None:
        self._nudged.set()


class LosesEveryNotification(InMemoryStreamManager):
    def _subscribe(self, reader: ResumableStreamReader) -> Subscription:
        return Deaf()


class RedisLosesEveryNotification(RedisStreamManager):
    def _subscribe(self, reader: ResumableStreamReader) -> Subscription:
        return Deaf()


@pytest.fixture(params=["memory", "redis"])
async def manager(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        yield LosesEveryNotification()
        return
    store = RedisLosesEveryNotification(
        request.getfixturevalue("redis_url"), key_prefix=f"lost:{uuid.uuid4().hex[:8]}:"
    )
    yield store
    await store.aclose()


def delta(text: str) -> TextDelta:
    return TextDelta(delta=text, agent_id="run-1", timestamp=1)


async def follow(manager: StreamManager, stream_id: str) -> tuple[list[str], float, BaseException | None]:
    reader = await manager.create_resumable_reader(stream_id, 0)
    assert reader is not None
    texts, started, error = [], time.monotonic(), None
    try:
        async for chunk, _ in reader:
            assert isinstance(chunk, TextDelta)
            texts.append(chunk.delta)
    except StreamNotFoundError as exc:
        error = exc
    return texts, time.monotonic() - started, error


@pytest.mark.parametrize("ending", ["end", "fail", "delete"])
async def test_a_stream_closes_even_if_every_notification_is_lost(manager: StreamManager, ending: str) -> None:
    writer = await manager.create_writer("s1", "run-1")
    await writer.write(delta("one"))
    following = asyncio.ensure_future(follow(manager, "s1"))
    await asyncio.sleep(0.1)  # the reader is caught up and waiting
    await writer.write(delta("two"))
    if ending == "end":
        await manager.end_stream("s1")
    elif ending == "fail":
        await manager.fail_stream("s1", "the model is down")
    else:
        await manager.delete_stream("s1")
    texts, took, error = await asyncio.wait_for(following, 5)
    assert took < 2.0  # RECHECK_SECONDS and half of it, at the most
    if ending == "delete":
        assert isinstance(error, StreamNotFoundError)
    else:
        assert texts == ["one", "two"] and error is None
