"""What only the Redis store promises: keys, the shared tail, and surviving a flaky Redis."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import redis

from chat.ai_sdk.transformer import StreamTransformer
from streams.backends import RedisStreamManager
from streams.backends.redis_tail import TailHub
from streams.backoff import Backoff, retry
from streams.exceptions import StreamUnavailableError
from streams.protocol import UnknownChunk
from tests.streams.helpers import text, texts


def helix_connections(client: redis.Redis, manager: RedisStreamManager) -> list[dict[str, Any]]:
    return [c for c in client.client_list() if c.get("name") == manager.client_name]


async def test_keys_use_the_prefix_and_one_hash_tag(
    redis_manager: RedisStreamManager, redis_client: redis.Redis, key_prefix: str
) -> None:
    writer = await redis_manager.create_writer("chat-1", "a")
    await writer.begin_step(1)
    await writer.write(text("x"))
    keys = sorted(k.decode() for k in redis_client.scan_iter(match=f"{key_prefix}*"))
    assert keys == [f"{key_prefix}{{chat-1}}:{suffix}" for suffix in ("c", "m", "s")]
    entries = redis_client.xrange(f"{key_prefix}{{chat-1}}:c")
    assert entries is not None and [entry_id for entry_id, _ in entries] == [b"1-0"]  # the sequence is the entry id


async def test_every_key_gets_the_ttl_once_the_stream_ends(
    redis_url: str, redis_client: redis.Redis, key_prefix: str
) -> None:
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix, ttl=120, active_ttl=None)
    try:
        writer = await manager.create_writer("s", "a")
        await writer.begin_step(1)
        await writer.write(text("x"))
        keys = [f"{key_prefix}{{s}}:{suffix}" for suffix in ("c", "m", "s")]
        assert [redis_client.ttl(k) for k in keys] == [-1, -1, -1]
        await manager.end_stream("s")
        assert all(100 < redis_client.ttl(k) <= 120 for k in keys)
        await manager.reopen_stream("s")  # a new run: no expiry while it is active
        assert [redis_client.ttl(k) for k in keys] == [-1, -1, -1]
        await manager.end_stream("s")
        await manager.open_stream("s", "run-2")  # a new run, as an executor starts it
        assert [redis_client.ttl(k) for k in keys] == [-1, -1, -1]
    finally:
        await manager.aclose()


async def test_a_thousand_tailing_readers_share_at_most_four_connections(
    redis_url: str, redis_client: redis.Redis, key_prefix: str
) -> None:
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix)
    try:
        streams = [f"s{i}" for i in range(100)]
        writers = [await manager.create_writer(s, "a") for s in streams]
        readers = [await manager.create_resumable_reader(streams[i % 100]) for i in range(1000)]
        tasks = [asyncio.ensure_future(_count(r)) for r in readers]
        await asyncio.sleep(0.5)  # every reader is now tailing
        for writer in writers:
            await writer.write_many(texts(3))
        connections = helix_connections(redis_client, manager)
        for stream_id in streams:
            await manager.end_stream(stream_id)
        counts = await asyncio.wait_for(asyncio.gather(*tasks), 20)
        assert counts == [3] * 1000
        assert 1 <= len(connections) <= 4, connections
    finally:
        await manager.aclose()


async def _count(reader) -> int:  # type: ignore[no-untyped-def]
    return sum([1 async for _ in reader])


@pytest.mark.parametrize("kill", ["pubsub", "normal", "all"])
async def test_live_tail_survives_killed_connections(
    redis_url: str, redis_client: redis.Redis, key_prefix: str, kill: str
) -> None:
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix, retry_timeout=10)
    try:
        writer = await manager.create_writer("s", "a")
        readers = [await manager.create_resumable_reader("s") for _ in range(5)]
        tasks = [asyncio.ensure_future(_sequences(r)) for r in readers]
        written = 0
        for round_ in range(6):
            for _ in range(50):
                while True:
                    try:
                        await writer.write(text("x"))
                        break
                    except StreamUnavailableError:
                        await asyncio.sleep(0.02)  # the write was refused as a whole: retry it
                written += 1
            for connection in helix_connections(redis_client, manager):
                is_pubsub = "P" in str(connection.get("flags"))
                if kill == "all" or (kill == "pubsub") == is_pubsub:
                    redis_client.client_kill_filter(_id=connection["id"])
            await asyncio.sleep(0.05 * round_)
        await retry(
            lambda: manager.end_stream("s"), StreamUnavailableError, Backoff(initial=0.05, factor=1, attempts=50)
        )
        results = await asyncio.wait_for(asyncio.gather(*tasks), 20)
        for sequences in results:
            assert sequences == list(range(1, written + 1))
    finally:
        await manager.aclose()


async def _sequences(reader) -> list[int]:  # type: ignore[no-untyped-def]
    return [sequence async for _, sequence in reader]


async def tailing(manager: RedisStreamManager, stream_id: str) -> tuple[Any, asyncio.Future[Any]]:
    """A writer of a new stream, and a reader's wait for its first chunk (the reader tails it)."""
    writer = await manager.create_writer(stream_id, "a")
    reader = await manager.create_resumable_reader(stream_id)
    assert reader is not None
    return writer, asyncio.ensure_future(reader.__anext__())


async def test_an_idle_tail_outlives_the_socket_timeout(
    redis_url: str, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix, socket_timeout=0.5)
    try:
        writer, waiting = await tailing(manager, "s")
        await asyncio.sleep(1.5)  # three socket timeouts of silence
        await writer.write(text("late"))
        assert (await asyncio.wait_for(waiting, 5))[1] == 1
        assert "lost its Redis connection" not in caplog.text
    finally:
        await manager.aclose()


def _pubsub_ids(client: redis.Redis, manager: RedisStreamManager) -> set[str]:
    return {c["id"] for c in helix_connections(client, manager) if "P" in str(c.get("flags"))}


async def test_the_tail_connection_waits_a_while_for_the_next_stream_and_then_goes(
    redis_url: str, redis_client: redis.Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quiet process's streams go live one after another: each subscribes on the connection the
    last one left, instead of connecting (and the last one's channel is unsubscribed)."""
    monkeypatch.setattr(TailHub, "idle_linger", 0.6)
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix)

    def channels() -> list[str]:
        return [str(c) for c in redis_client.pubsub_channels() if key_prefix in str(c)]

    async def tail_once(stream_id: str) -> None:
        writer = await manager.create_writer(stream_id, "a")
        reader = await manager.create_resumable_reader(stream_id)
        assert reader is not None
        first = asyncio.ensure_future(reader.__anext__())
        await asyncio.sleep(0.1)  # caught up, and subscribed
        assert len(channels()) == 1
        await writer.write(text(stream_id))
        assert (await asyncio.wait_for(first, 5))[1] == 1
        await reader.aclose()

    def connected() -> set[str]:
        return {c["id"] for c in helix_connections(redis_client, manager)}

    try:
        await tail_once("one")
        await asyncio.sleep(0.1)
        hub = manager._state().hub
        kept, before = hub._connection, connected()
        assert kept is not None and channels() == []  # kept, and subscribed to nothing
        await tail_once("two")
        assert hub._connection is kept and connected() == before  # no connection made
        await asyncio.sleep(1.0)  # longer than the linger with no stream tailed
        assert hub._connection is None and len(before - connected()) == 1
        await tail_once("three")  # and a new connection when one goes live after that
        assert hub._connection is not None and len(connected() - before) == 1
    finally:
        await manager.aclose()


async def test_a_silent_tail_connection_is_pinged_and_a_dead_one_replaced(
    redis_url: str,
    redis_client: redis.Redis,
    key_prefix: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hub reads its pub/sub socket itself: it pings a connection that has been silent for an
    interval, keeps one that answers, and replaces one that stays silent (a Redis that hangs, a
    peer gone without a FIN), after which its readers re-read and tail on."""
    monkeypatch.setattr(TailHub, "health_check_interval", 0.2)
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix, retry_timeout=10)
    try:
        writer, waiting = await tailing(manager, "s")
        await asyncio.sleep(0.3)
        first = _pubsub_ids(redis_client, manager)
        assert len(first) == 1
        pings = int(redis_client.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))
        await asyncio.sleep(1.0)  # five silent intervals, each ping answered
        assert int(redis_client.info("commandstats")["cmdstat_ping"]["calls"]) >= pings + 2
        assert _pubsub_ids(redis_client, manager) == first
        assert "lost its Redis connection" not in caplog.text
        redis_client.client_pause(1000)  # Redis answers no one: the ping neither
        await asyncio.sleep(1.5)
        assert "went silent" in caplog.text
        await writer.write(text("after"))
        assert (await asyncio.wait_for(waiting, 5))[1] == 1
        assert len(_pubsub_ids(redis_client, manager) - first) == 1
    finally:
        await manager.aclose()


async def test_subscribes_long_after_the_connect_keep_the_tail_connection(
    redis_url: str, redis_client: redis.Redis, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The hub writes its (un)subscribes straight to its socket: redis-py's send_command would
    run the pool's health check on a connection it has not read from for a while, reading the
    reply the hub's listener waits for, and the connection would be lost."""
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix, retry_timeout=10)
    try:
        first_writer, waiting_first = await tailing(manager, "one")
        await asyncio.sleep(0.3)
        connection = manager._state().hub._connection
        assert connection is not None
        connection.health_check_interval, connection.next_health_check = 0.05, 0  # due now
        before = _pubsub_ids(redis_client, manager)
        second_writer, waiting_second = await tailing(manager, "two")  # a SUBSCRIBE on that connection
        await asyncio.sleep(0.3)
        await first_writer.write(text("one"))
        await second_writer.write(text("two"))
        assert (await asyncio.wait_for(waiting_first, 5))[1] == 1
        assert (await asyncio.wait_for(waiting_second, 5))[1] == 1
        assert _pubsub_ids(redis_client, manager) == before
        assert "lost its Redis connection" not in caplog.text
    finally:
        await manager.aclose()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_unreachable_redis_raises_a_retryable_typed_error() -> None:
    manager = RedisStreamManager(f"redis://127.0.0.1:{_closed_port()}/0", socket_timeout=1, retry_timeout=0.3)
    try:
        for action in (
            manager.create_writer("s", "a"),
            manager.get_stream_info("s"),
            manager.create_resumable_reader("s"),
            manager.end_stream("s"),
            manager.get_all_chunks("s"),
        ):
            with pytest.raises(StreamUnavailableError) as info:
                await action
            assert info.value.retryable and info.value.status_code == 503
    finally:
        await manager.aclose()


async def test_a_reader_gives_up_with_a_typed_error_when_redis_stays_away(
    redis_url: str, redis_client: redis.Redis, key_prefix: str
) -> None:
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix, retry_timeout=0.5)
    try:
        writer = await manager.create_writer("s", "a")
        await writer.write(text("x"))
        reader = await manager.create_resumable_reader("s")
        assert reader is not None
        assert (await reader.__anext__())[1] == 1
        manager.url = f"redis://127.0.0.1:{_closed_port()}/0"  # Redis "moves away" for good
        for connection in helix_connections(redis_client, manager):
            redis_client.client_kill_filter(_id=connection["id"])
        manager._states.clear()
        with pytest.raises(StreamUnavailableError):
            await asyncio.wait_for(reader.__anext__(), 10)
    finally:
        await manager.aclose()


async def test_a_chunk_of_an_unknown_type_is_skipped_not_fatal(
    redis_manager: RedisStreamManager, redis_client: redis.Redis, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    writer = await redis_manager.create_writer("s", "a")
    await writer.write(text("before"))
    # A newer producer wrote a type this version does not know.
    redis_client.xadd(f"{key_prefix}{{s}}:c", {"c": b'{"type":"hologram","agentId":"a","timestamp":1}'}, id="2-0")
    redis_client.hset(f"{key_prefix}{{s}}:m", "seq", 2)
    await writer.write(text("after"))
    await redis_manager.end_stream("s")
    reader = await redis_manager.create_resumable_reader("s")
    assert reader is not None
    items = [item async for item in reader]
    assert [sequence for _, sequence in items] == [1, 2, 3]
    unknown = items[1][0]
    assert isinstance(unknown, UnknownChunk) and unknown.type == "hologram" and unknown.agent_id == "a"
    assert "unknown type 'hologram'" in caplog.text
    transformer = StreamTransformer(message_id="m")
    events = [event for chunk, sequence in items for event in transformer.transform(chunk, sequence)[0]]
    assert [type(e).__name__ for e in events] == ["StartChunk", "TextStartChunk", "TextDeltaChunk", "TextDeltaChunk"]


async def test_a_batch_appended_again_under_its_token_is_stored_once(
    redis_manager: RedisStreamManager, redis_client: redis.Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose append reply was lost with its connection sends the batch again under the
    same token: the store answers with the sequence it stored it at and stores nothing twice;
    the stream is stamped with the writer's clock, and a newer epoch is kept."""
    from streams.backends.records import WriteBatch
    from streams.protocol import encode_chunk

    await redis_manager.create_writer("t", "a")
    monkeypatch.setattr("streams.backends.redis.now_ms", lambda: 1_000)  # the writer's clock

    def batch(token: str | None, *words: str) -> WriteBatch:
        encoded = [encode_chunk(text(word)) for word in words]
        return WriteBatch([c for c, _ in encoded], [p for _, p in encoded], token=token)

    assert await redis_manager._append("t", batch("w1:1", "a", "b"), epoch=2) == 2
    assert await redis_manager._append("t", batch("w1:1", "a", "b"), epoch=2) == 2  # the retry
    assert await redis_manager._append("t", batch("w2:1", "c")) == 3  # another writer's first batch
    assert await redis_manager._append("t", batch("w1:2", "d"), epoch=2) == 4
    # A writer retries only its last batch; an older one is stored already: nothing again.
    assert await redis_manager._append("t", batch("w1:1", "a", "b"), epoch=2) == 4
    # A superseded writer's retry of a batch it stored gets its answer, not an error.
    assert await redis_manager._append("t", batch("w2:1", "c"), epoch=1) == 3
    assert await redis_manager._append("t", batch(None, "e")) == 5  # no token: stored as it comes
    entries = redis_client.xrange(f"{key_prefix}{{t}}:c")
    assert entries is not None and [entry_id for entry_id, _ in entries] == [b"%d-0" % n for n in range(1, 6)]
    info = await redis_manager.get_stream_info("t")
    assert info is not None and info.latest_sequence == 5 and info.epoch == 2
    assert info.updated_at == 1_000
