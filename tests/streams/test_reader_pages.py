"""A reader catching up on a long stream reads few pages: they grow from the store's ``page_size``
(a quick first event) to about ``PAGE_BYTES`` of stored chunks; pages of large chunks stay small,
so a client that stops reading makes the server hold a bounded page."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from streams.backends import RedisStreamManager
from streams.backends.readers import MAX_PAGE_CHUNKS, PAGE_BYTES
from streams.backends.records import ReadPage
from streams.protocol import TextDelta


class CountingPages(RedisStreamManager):
    """The Redis store, noting the size of every page a reader asks for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits: list[int] = []
        self.sizes: list[int] = []

    async def _read_page(self, stream_id: str, after_sequence: int, limit: int) -> ReadPage | None:
        page = await super()._read_page(stream_id, after_sequence, limit)
        self.limits.append(limit)
        self.sizes.append(page.nbytes if page else 0)
        return page


@pytest.fixture
async def store(redis_url: str) -> Any:
    manager = CountingPages(redis_url, key_prefix=f"pages:{uuid.uuid4().hex[:8]}:")
    yield manager
    await manager.aclose()


async def replay(store: CountingPages, chunks: int, size: int) -> list[int]:
    writer = await store.create_writer("s1", "run-1")
    await writer.write_many(
        TextDelta(delta=f"{i:06d}" + "x" * size, agent_id="run-1", timestamp=1) for i in range(chunks)
    )
    await store.end_stream("s1")
    store.limits.clear()
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
