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
    def _subscribe(self, stream_id: str) -> Subscription:
        return Deaf()


class RedisLosesEveryNotification(RedisStreamManager):
    def _subscribe(self, stream_id: str) -> Subscription:
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


class WrittenWhileSubscribing(Subscription):
    """A real subscription, with a chunk written just before it goes live: no notification will
    ever tell its reader about that chunk."""

    def __init__(self, inner: Subscription, write: Any) -> None:
        self.inner, self.write = inner, write

    async def ready(self) -> None:
        await self.write()
        await self.inner.ready()

    async def wait(self) -> Any:
        return await self.inner.wait()

    def close(self) -> None:
        self.inner.close()

    def nudge(self) -> None:
        self.inner.nudge()


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_chunk_written_before_the_subscription_is_live_is_not_missed(
    backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between a reader's last page and its subscription going live, a chunk goes unannounced;
    the check made once the subscription is live finds it (not the watchdog: it is made to wait
    an hour here)."""
    monkeypatch.setattr("streams.backends.readers.RECHECK_SECONDS", 3600.0)
    manager: StreamManager
    if backend == "memory":
        manager = InMemoryStreamManager()
    else:
        manager = RedisStreamManager(request.getfixturevalue("redis_url"), key_prefix=f"race:{uuid.uuid4().hex[:8]}:")
    # Another stream followed first: the tail is connected already (a new connection subscribes
    # every channel once more, and its readers read again anyway).
    warm_writer = await manager.create_writer("s0", "run-0")
    warm = await manager.create_resumable_reader("s0", 0)
    assert warm is not None
    warm_chunk = asyncio.ensure_future(anext(warm))
    while warm._subscription is None:
        await asyncio.sleep(0.01)
    await warm_writer.write(delta("warm"))
    await warm_writer.flush()
    await asyncio.wait_for(warm_chunk, 10)

    writer = await manager.create_writer("s1", "run-1")
    await writer.write(delta("one"))
    subscribe = manager._subscribe

    async def write_two() -> None:
        await writer.write(delta("two"))
        await writer.flush()  # stored now, not by a buffer that flushes later

    def racing(stream_id: str) -> Subscription:
        return WrittenWhileSubscribing(subscribe(stream_id), write_two)

    monkeypatch.setattr(manager, "_subscribe", racing)
    reader = await manager.create_resumable_reader("s1", 0)
    assert reader is not None
    seen: list[str] = []

    async def read_two() -> None:
        async for chunk, _ in reader:
            assert isinstance(chunk, TextDelta)
            seen.append(chunk.delta)
            if len(seen) == 2:
                return

    try:
        await asyncio.wait_for(read_two(), 10)
        assert seen == ["one", "two"]
    finally:
        await reader.aclose()
        await warm.aclose()
        await manager.aclose()


class CountsChecks(LosesEveryNotification):
    """Notes every check of subscribed readers' streams, and how many were out at once."""

    def __init__(self) -> None:
        super().__init__()
        self.checks: list[int] = []  # streams per check
        self.out = self.most_out = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def _positions(self, stream_ids: list[str]) -> dict[str, tuple[str, int] | None]:
        self.checks.append(len(stream_ids))
        self.out += 1
        self.most_out = max(self.most_out, self.out)
        try:
            await self.gate.wait()
            return await super()._positions(stream_ids)
        finally:
            self.out -= 1


async def test_readers_subscribing_at_once_are_checked_one_round_trip_at_a_time() -> None:
    """A reconnect storm's readers go live over many turns of the loop; their checks go out one at
    a time, 64 streams each, instead of a task per turn all waiting for the store at once, and a
    reader that left before its check is not checked."""
    store = CountsChecks()
    streams = [f"s{i}" for i in range(300)]
    for stream_id in streams:
        await store.create_writer(stream_id, "r")
    store.gate.clear()  # the first check waits: the others queue up behind it
    readers: list[ResumableStreamReader] = []
    tails: list[asyncio.Task[Any]] = []
    for index, stream_id in enumerate(streams):
        reader = await store.create_resumable_reader(stream_id, 0)
        assert reader is not None
        readers.append(reader)
        tails.append(asyncio.ensure_future(anext(reader.batches())))
        if index % 10 == 9:
            await asyncio.sleep(0)  # the readers go live over many turns of the loop
    while len(store.checks) < 1:
        await asyncio.sleep(0)
    for reader in readers[150:]:  # half the clients leave before their readers are checked
        await reader.aclose()
    store.gate.set()
    for _ in range(50):
        await asyncio.sleep(0)
    assert store.most_out == 1
    assert sum(store.checks) <= 150 + 64, store.checks  # the first check, then only open readers
    assert max(store.checks) <= 64
    for reader in readers[:150]:
        await reader.aclose()
    for tail in tails:
        tail.cancel()
    await asyncio.gather(*tails, return_exceptions=True)
