"""A reconnect storm against the Redis store: the page reads and subscribes of one event loop go to
Redis together (streams.backends.redis_reads, redis_tail), and every reader still gets its own
stream's page, or its own error."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from redis.exceptions import NoPermissionError, ResponseError

from streams.backends import RedisStreamManager, redis_wire
from streams.exceptions import StreamUnavailableError
from streams.protocol import TextDelta
from tests.streams.helpers import texts


def calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def test_three_hundred_resumes_at_once_read_their_pages_in_a_few_transactions(
    redis_url: str, redis_client: redis.Redis, key_prefix: str
) -> None:
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix)
    try:
        streams = [f"s{i}" for i in range(300)]
        for index, stream_id in enumerate(streams):
            writer = await manager.create_writer(stream_id, "a")
            await writer.write_many(texts(index % 7, prefix=f"{stream_id}-"))
            if index % 3 == 0:
                await manager.end_stream(stream_id)
        before = calls(redis_client, "multi")
        pages = await asyncio.gather(*(manager.first_page(s, 1) for s in streams))
        transactions = calls(redis_client, "multi") - before
        assert transactions <= 300 // 64 + 3, transactions  # one by one, it was 300
        for index, (stream_id, page) in enumerate(zip(streams, pages, strict=True)):
            assert page is not None
            written = index % 7
            assert [sequence for _, sequence in page.chunks] == list(range(2, written + 1))
            deltas = [chunk.delta for chunk, _ in page.chunks if isinstance(chunk, TextDelta)]
            assert deltas == [f"{stream_id}-{i}" for i in range(1, written)]
            assert (page.status, page.latest_sequence) == ("ended" if index % 3 == 0 else "active", written)
        assert await manager.first_page("no-such-stream", 0) is None
    finally:
        await manager.aclose()


async def test_a_read_that_fails_in_a_shared_transaction_fails_alone(
    redis_url: str, redis_client: redis.Redis, key_prefix: str
) -> None:
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix)
    try:
        for stream_id in ("good-1", "broken", "good-2"):
            writer = await manager.create_writer(stream_id, "a")
            await writer.write_many(texts(2))
        redis_client.delete(f"{key_prefix}{{broken}}:c")
        redis_client.set(f"{key_prefix}{{broken}}:c", "not a stream")  # XRANGE on it: WRONGTYPE
        first, broken, second = await asyncio.gather(
            manager.first_page("good-1", 0),
            manager.first_page("broken", 0),
            manager.first_page("good-2", 0),
            return_exceptions=True,
        )
        assert isinstance(broken, ResponseError) and "WRONGTYPE" in str(broken)
        for page in (first, second):
            assert not isinstance(page, BaseException) and page is not None
            assert [sequence for _, sequence in page.chunks] == [1, 2]
    finally:
        await manager.aclose()


async def test_a_reader_that_leaves_before_its_page_arrives_takes_no_one_with_it(
    redis_url: str, key_prefix: str
) -> None:
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix)
    try:
        for stream_id in ("a", "b", "c"):
            writer = await manager.create_writer(stream_id, "a")
            await writer.write_many(texts(1))
        leaving = asyncio.ensure_future(manager.first_page("b", 0))
        staying = [asyncio.ensure_future(manager.first_page(s, 0)) for s in ("a", "c")]
        await asyncio.sleep(0)
        leaving.cancel()
        pages = await asyncio.wait_for(asyncio.gather(*staying), 5)
        assert [[sequence for _, sequence in page.chunks] for page in pages if page is not None] == [[1], [1]]
        with pytest.raises(asyncio.CancelledError):
            await leaving
        page = await manager.first_page("b", 0)  # the loop's reads go on
        assert page is not None and len(page.chunks) == 1
    finally:
        await manager.aclose()


async def test_readers_tailing_three_hundred_streams_subscribe_in_a_few_commands(
    redis_url: str, redis_client: redis.Redis, key_prefix: str
) -> None:
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix)
    try:
        streams = [f"t{i}" for i in range(300)]
        writers = [await manager.create_writer(s, "a") for s in streams]
        before = calls(redis_client, "subscribe")
        readers = await asyncio.gather(*(manager.create_resumable_reader(s) for s in streams))
        pages = calls(redis_client, "xrange")
        tails = [asyncio.ensure_future(_sequences(r)) for r in readers]
        await asyncio.sleep(0.5)  # every reader is tailing now
        subscribes = calls(redis_client, "subscribe") - before
        assert 1 <= subscribes <= 5, subscribes  # one by one, it was 300
        # Subscribed, each reader checks that its stream did not move on meanwhile: a position read
        # with the others', not a page of its own; and each channel is subscribed once (a second
        # confirmation would send its readers to read their streams again).
        assert calls(redis_client, "xrange") == pages
        for writer in writers:
            await writer.write_many(texts(2))
        for stream_id in streams[:150]:  # half the readers leave: their channels go in a few commands
            await manager.end_stream(stream_id)
        assert await asyncio.wait_for(asyncio.gather(*tails[:150]), 10) == [[1, 2]] * 150
        for writer in writers[150:]:
            await writer.write_many(texts(1))
        for stream_id in streams[150:]:
            await manager.end_stream(stream_id)
        assert await asyncio.wait_for(asyncio.gather(*tails[150:]), 10) == [[1, 2, 3]] * 150
    finally:
        await manager.aclose()


async def _sequences(reader) -> list[int]:  # type: ignore[no-untyped-def]
    return [sequence async for _, sequence in reader]


async def test_a_read_asked_for_as_the_last_transactions_end_is_still_sent(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two transactions in flight end in the same loop iteration and a caller reads again at once
    (a resume reads twice): that read must go out (it once waited for a read that never came)."""
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix)
    try:
        for stream_id in ("a", "b"):
            await manager.create_writer(stream_id, "w")
        exchange, release = redis_wire.exchange, asyncio.Event()

        async def exchange_then_wait(*args: Any) -> list[Any]:
            replies = await exchange(*args)  # Redis answered...
            await release.wait()  # ...and both transactions end together
            return replies

        monkeypatch.setattr("streams.backends.redis_reads.exchange", exchange_then_wait)

        async def twice(stream_id: str) -> int:
            await manager.first_page(stream_id, 0)
            page = await manager.first_page(stream_id, 0)
            assert page is not None
            return page.latest_sequence

        first = asyncio.ensure_future(twice("a"))
        await asyncio.sleep(0.2)  # its transaction is in flight, held
        second = asyncio.ensure_future(manager.first_page("b", 0))  # a second transaction beside it
        await asyncio.sleep(0.2)
        monkeypatch.setattr(
            "streams.backends.redis_reads.exchange", exchange
        )  # the reads asked for next go out as usual
        release.set()
        assert await asyncio.wait_for(first, 5) == 0
        page = await second
        assert page is not None and page.status == "active"
    finally:
        await manager.aclose()


async def test_a_read_redis_refuses_to_queue_fails_alone(
    redis_url: str, redis_client: redis.Redis, key_prefix: str
) -> None:
    """A read that aborts the shared transaction as it is queued (here an ACL refusing one
    stream's keys) is sent again on its own; the others of its batch are read all the same."""
    owner = RedisStreamManager(redis_url, key_prefix=key_prefix)
    user = f"helix-limited-{key_prefix.strip(':').replace(':', '-')}"
    redis_client.acl_setuser(user, enabled=True, passwords=["+pw"], keys=[f"{key_prefix}{{good*"], commands=["+@all"])
    limited = RedisStreamManager(redis_url.replace("redis://", f"redis://{user}:pw@"), key_prefix=key_prefix)
    try:
        for stream_id in ("good-1", "bad", "good-2"):
            writer = await owner.create_writer(stream_id, "a")
            await writer.write_many(texts(2))
        pages = await asyncio.gather(
            *(limited.first_page(s, 0) for s in ("good-1", "bad", "good-2")), return_exceptions=True
        )
        assert isinstance(pages[1], NoPermissionError), pages[1]
        for page in (pages[0], pages[2]):
            assert not isinstance(page, BaseException) and page is not None
            assert [sequence for _, sequence in page.chunks] == [1, 2]
    finally:
        await limited.aclose()
        await owner.aclose()
        redis_client.acl_deluser(user)


async def test_a_reader_that_leaves_in_the_middle_of_a_long_read_keeps_its_connection(
    redis_url: str, redis_client: redis.Redis, key_prefix: str
) -> None:
    """A client closing a resume while the run's chunks are read (a long read goes out alone):
    the reply is read to its end and the connection goes back to the pool. Cancelled mid-reply,
    redis-py drops the connection, and the next read pays for a new one."""
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix)
    try:
        writer = await manager.create_writer("long", "a")
        await writer.write_many(texts(20_000))
        await manager.first_page("long", 0)

        def connections() -> set[str]:
            return {c["id"] for c in redis_client.client_list() if c.get("name") == manager.client_name}

        before = connections()
        for _ in range(3):
            leaving = asyncio.ensure_future(manager.get_chunks_from_sequence("long", 0))
            await asyncio.sleep(0.002)  # the transaction is out; its reply (about 1 MB) is not all in
            assert not leaving.done()
            leaving.cancel()
            with pytest.raises(asyncio.CancelledError):
                await leaving
            await asyncio.sleep(0.3)  # the abandoned reply is read; its connection is back in the pool
        assert connections() == before  # the same connections: none dropped, none opened
        chunks = await manager.get_chunks_from_sequence("long", 19_990)
        assert [sequence for _, sequence in chunks] == list(range(19_991, 20_001))
    finally:
        await manager.aclose()


async def test_a_read_redis_does_not_answer_in_time_fails_and_leaves_no_late_reply_behind(
    redis_url: str, redis_client: redis.Redis, key_prefix: str
) -> None:
    """Page reads are written to a pooled connection's socket and read off it by the store: a
    read Redis does not answer within the socket timeout fails as unreachable, and the connection
    it waited on is closed, not given back to the pool with the late reply still to come (the
    next read on it would take that reply for its own)."""
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix, socket_timeout=0.2)
    try:
        writer = await manager.create_writer("s", "a")
        await writer.write_many(texts(3))
        redis_client.client_pause(2500)  # Redis answers no one for a while
        with pytest.raises(StreamUnavailableError):
            await manager.first_page("s", 0)
        await asyncio.sleep(2.6)  # the paused replies are sent now, to whoever still listens
        for after, sequences in ((1, [2, 3]), (2, [3]), (0, [1, 2, 3])):
            page = await manager.first_page("s", after)
            assert page is not None and [sequence for _, sequence in page.chunks] == sequences
    finally:
        await manager.aclose()
