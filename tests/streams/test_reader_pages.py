"""A reader catching up on a long stream reads few pages: they grow from the store's ``page_size``
(a quick first event) to about ``PAGE_BYTES`` of stored chunks; pages of large chunks stay small,
so a client that stops reading makes the server hold a bounded page. Read in batches, the next
page is on its way from Redis while the caller frames and sends the last one."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from streams.backends import RedisStreamManager
from streams.backends.readers import MAX_PAGE_CHUNKS, PAGE_BYTES
from streams.backends.records import ReadPage
from streams.exceptions import StreamUnavailableError
from streams.protocol import TextDelta


class CountingPages(RedisStreamManager):
    """The Redis store, noting the size of every page a reader asks for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits: list[int] = []
        self.sizes: list[int] = []
        self.reads: list[tuple[int, int]] = []  # (after, chunks read) of every read that completed
        self.started = 0  # reads begun
        self.gate = asyncio.Event()  # cleared: reads after the first ``hold_from`` wait for it
        self.gate.set()
        self.hold_from = 1
        self.fail_after: int | None = None  # reads after this many raise, as an unreachable Redis

    async def _read_page(self, stream_id: str, after_sequence: int, limit: int) -> ReadPage | None:
        self.started += 1
        if self.started > self.hold_from:
            await self.gate.wait()
        if self.fail_after is not None and self.started > self.fail_after:
            raise StreamUnavailableError("s1", "Redis is unreachable")
        page = await super()._read_page(stream_id, after_sequence, limit)
        self.limits.append(limit)
        self.sizes.append(page.nbytes if page else 0)
        self.reads.append((after_sequence, len(page.chunks) if page else 0))
        return page


@pytest.fixture
async def store(redis_url: str) -> Any:
    manager = CountingPages(redis_url, key_prefix=f"pages:{uuid.uuid4().hex[:8]}:")
    yield manager
    await manager.aclose()


async def write(store: CountingPages, chunks: int, size: int, vary: int = 0) -> None:
    """``chunks`` text deltas of ``size`` bytes of text (give or take up to ``vary``)."""
    writer = await store.create_writer("s1", "run-1")
    await writer.write_many(
        TextDelta(delta=f"{i:06d}" + "x" * (size + (i * 7919) % (2 * vary + 1) - vary), agent_id="run-1", timestamp=1)
        for i in range(chunks)
    )
    await store.end_stream("s1")
    store.limits.clear()
    store.reads.clear()
    store.started = 0


async def replay(store: CountingPages, chunks: int, size: int) -> list[int]:
    await write(store, chunks, size)
    reader = await store.create_resumable_reader("s1", 0)
    assert reader is not None
    seen = [int(chunk.delta[:6]) async for chunk, _ in reader]  # type: ignore[union-attr]
    assert seen == list(range(chunks))  # every chunk, once, in order
    return store.limits


async def test_pages_grow_while_a_reader_catches_up_on_small_chunks(store: CountingPages) -> None:
    limits = await replay(store, 10_000, 40)
    assert limits[0] == store.page_size  # the first page is small: a quick first event
    assert max(limits) > 4 * store.page_size and max(limits) <= MAX_PAGE_CHUNKS
    assert len(limits) <= 20, limits  # 10,000 chunks at 128 a page would be 79 round trips
    assert max(store.sizes) <= 2 * PAGE_BYTES


async def test_pages_of_large_chunks_stay_small(store: CountingPages) -> None:
    limits = await replay(store, 600, 2000)
    assert set(limits) == {store.page_size}, limits  # 128 x 2 KB is over the page budget already


async def test_batches_read_the_next_page_while_the_caller_sends_this_one(store: CountingPages, redis_url: str) -> None:
    """A server's send does not yield to the loop: the read of the next page has to be on its way
    to Redis when a batch is handed over, not merely scheduled to start. From the third batch on:
    before that, a reader asks for one page at a time (a reconnect that leaves after a page or two
    costs the store no page more).

    On the way, not there: a read asked for when its page had already come (the machine stalled
    the reader, not Redis) goes out on the caller's next await, so the rule is asked of every
    batch but one, and the reader never asks for more than the one page ahead."""
    import redis

    stats = redis.Redis.from_url(redis_url)

    def xranges() -> int:
        return int(stats.info("commandstats").get("cmdstat_xrange", {}).get("calls", 0))

    await write(store, 5_000, 40)
    warm = await store.create_resumable_reader("s1", 0)  # the pool opens its connections
    assert warm is not None
    async for _ in warm:
        pass
    started = store.started
    before = xranges()
    reader = await store.create_resumable_reader("s1", 0)
    assert reader is not None
    seen: list[int] = []
    handed = 0
    ahead: list[bool] = []
    async for batch in reader.batches():
        handed += 1
        # No await in here: Redis has the next page's XRANGE already, besides this page's.
        if handed > 2 and batch[-1][0].delta[:6] < "004999":  # type: ignore[union-attr]
            # Redis has seen it (other clients of the same server may add XRANGEs of their own),
            # and the reader asked for no more than that one page ahead.
            ahead.append(xranges() - before >= handed + 1 and store.started - started == handed + 1)
            assert store.started - started <= handed + 1
        seen += [int(chunk.delta[:6]) for chunk, _ in batch]  # type: ignore[union-attr]
    stats.close()
    assert seen == list(range(5_000))  # every chunk, once, in order
    assert len(ahead) >= 5
    assert sum(ahead) >= len(ahead) - 1, f"the next page was on its way for {sum(ahead)} of {len(ahead)} batches"


async def test_pages_read_ahead_follow_on_when_chunk_sizes_vary(store: CountingPages) -> None:
    """The page size follows the chunks' size as the reader goes; a page asked for ahead still
    starts where the page before it ends, so none is read at a guess and dropped."""
    await write(store, 6_000, 60, vary=50)
    reader = await store.create_resumable_reader("s1", 0)
    assert reader is not None
    seen: list[int] = []
    async for batch in reader.batches():
        seen += [int(chunk.delta[:6]) for chunk, _ in batch]  # type: ignore[union-attr]
    assert seen == list(range(6_000))
    assert len(set(store.limits[1:])) > 1, store.limits  # the page size moved
    reads = sorted(store.reads)
    assert [after for after, _ in reads[1:]] == [after + count for after, count in reads[:-1]], reads


async def test_a_reader_closed_while_it_reads_ahead_leaves_no_read_behind(store: CountingPages) -> None:
    await write(store, 5_000, 40)
    reader = await store.create_resumable_reader("s1", 0)
    assert reader is not None
    store.hold_from = 3
    store.gate.clear()  # the read ahead (the fourth: it starts with the third page) waits
    batches = reader.batches()
    for _ in range(3):
        await anext(batches)
    await asyncio.sleep(0)
    assert store.started == 4
    await batches.aclose()  # the client left
    await asyncio.sleep(0)
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_a_page_read_ahead_that_fails_ends_the_batches_with_the_error(store: CountingPages) -> None:
    """An unreachable store is the caller's typed error, not a quiet end that looks like the
    stream's."""
    await write(store, 5_000, 40)
    store.retry_timeout = 0.2
    store.fail_after = 3  # the fourth read: the first read ahead
    reader = await store.create_resumable_reader("s1", 0)
    assert reader is not None
    seen = 0
    with pytest.raises(StreamUnavailableError):
        async for batch in reader.batches():
            seen += len(batch)
            await asyncio.sleep(0.5)  # a slow send: the read ahead has given up meanwhile
    assert 0 < seen < 5_000
