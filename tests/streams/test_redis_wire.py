"""Commands on the wire: the store's own RESP packing (byte for byte what redis-py sends), the
replies read back (pushes aside), and error replies typed as redis-py types them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection
from redis.exceptions import BusyLoadingError, ResponseError

from streams.backends import RedisStreamManager, redis_wire
from streams.backends.redis_reads import _executed
from streams.backends.redis_wire import exchange, pack
from tests.streams.helpers import texts

_arguments = st.one_of(st.text(), st.binary(), st.integers(min_value=-(2**63), max_value=2**63 - 1))
_names = st.sampled_from(["MULTI", "HMGET", "XRANGE", "EXEC"])
_commands = st.lists(st.tuples(_names, st.lists(_arguments)).map(lambda c: (c[0], *c[1])))


@given(commands=_commands)
def test_commands_are_packed_as_redis_py_packs_them(commands: list[tuple[Any, ...]]) -> None:
    assert pack(commands) == b"".join(Connection().pack_commands(commands))


@pytest.mark.parametrize("argument", [None, True, ["v"]])
def test_an_argument_redis_cannot_take_is_refused(argument: Any) -> None:
    with pytest.raises(TypeError):
        pack([("SET", "k", argument)])


class _Writer:
    def __init__(self) -> None:
        self.sent = b""

    def write(self, data: bytes) -> None:
        self.sent += data

    async def drain(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


class _Connection:
    """A pooled connection whose socket holds ``data``."""

    def __init__(self, data: bytes) -> None:
        self._writer = _Writer()
        self._reader = asyncio.StreamReader()
        self._reader.feed_data(data)
        self.disconnected = False

    async def disconnect(self) -> None:
        self.disconnected = True


class _Pool:
    def __init__(self, connection: _Connection) -> None:
        self.connection, self.released = connection, False

    async def get_connection(self) -> _Connection:
        return self.connection

    async def release(self, connection: _Connection) -> None:
        self.released = True


async def test_pushes_are_not_taken_for_replies_and_a_connection_left_with_more_is_closed() -> None:
    """Under RESP3 Redis may push (an invalidation, a maintenance notice) between replies: each
    command still gets its own reply, and a connection with bytes left after the last one is
    closed, not given to the next command."""
    push = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"
    connection = _Connection(b"+OK\r\n" + push + b":7\r\n>2\r\n$3\r\nfoo")
    pool = _Pool(connection)
    assert await exchange(pool, [("PING",), ("INCR", "k")], 1.0) == [b"OK", 7]
    assert connection._writer.sent == pack([("PING",), ("INCR", "k")])
    assert connection.disconnected and pool.released

    clean = _Connection(b"+OK\r\n" + push + b":7\r\n")
    assert await exchange(_Pool(clean), [("PING",), ("INCR", "k")], 1.0) == [b"OK", 7]
    assert not clean.disconnected


async def test_a_redis_still_loading_fails_the_reads_as_unreachable_and_they_are_retried(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LOADING`` (a Redis restarting with a dataset to load) is a ConnectionError to redis-py:
    the reads of the transaction it refused fail as the store being unreachable, which the store
    retries, not as a refused command, which it would not."""
    manager = RedisStreamManager(redis_url, key_prefix=key_prefix)
    try:
        writer = await manager.create_writer("s", "a")
        await writer.write_many(texts(2))
        loading = ResponseError("LOADING Redis is loading the dataset in memory")
        refused = [b"OK", loading, loading, ResponseError("EXECABORT Transaction discarded")]
        calls: list[int] = []

        async def still_loading_once(*args: Any) -> list[Any]:
            calls.append(1)
            return refused if len(calls) == 1 else await redis_wire.exchange(*args)

        monkeypatch.setattr("streams.backends.redis_reads.exchange", still_loading_once)
        with pytest.raises(BusyLoadingError):
            _executed(refused)
        page = await manager.first_page("s", 0)
        assert page is not None and [sequence for _, sequence in page.chunks] == [1, 2]
        assert len(calls) == 2
    finally:
        await manager.aclose()
