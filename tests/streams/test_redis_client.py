"""A Redis store on a client the site already has: its pool serves Helix, Helix's reply
callbacks stay off it, and closing the store leaves the site's pool open."""

from __future__ import annotations

import uuid

from redis.asyncio import Redis

from streams.backends import RedisStreamManager
from streams.protocol import TextDelta


async def test_a_store_on_the_sites_own_client(redis_url: str) -> None:
    client = Redis.from_url(redis_url)
    prefix = f"given:{uuid.uuid4().hex[:8]}:"
    store = RedisStreamManager(client=client, key_prefix=prefix)
    writer = await store.create_writer("s1", "run-1")
    await writer.write_many(TextDelta(delta=f"t{i}", agent_id="run-1", timestamp=1) for i in range(3))
    await store.end_stream("s1")
    reader = await store.create_resumable_reader("s1", 0)
    assert reader is not None
    assert [chunk.delta async for chunk, _ in reader] == ["t0", "t1", "t2"]  # type: ignore[union-attr]
    # The site's client reads its streams as redis-py does, not as Helix's raw replies.
    entries = await client.xrange(f"{prefix}{{s1}}:c")
    assert entries is not None and len(entries) == 3 and isinstance(entries[0][1], dict)
    await store.aclose()
    assert await client.ping()  # the pool is still the site's, and open
    await client.aclose()
