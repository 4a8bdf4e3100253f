"""Commands on the wire: the store's hottest reads written straight to a pooled connection's
socket, their replies read off it and parsed by hiredis.

redis-py's command path spends most of a small read's CPU in Python around the command: a task
and a timer per write (``asyncio.wait_for`` under a socket timeout), retry, observability and
response-callback layers, a parse call per reply. A page read or a batch of status checks needs
none of it: its commands are packed as redis-py packs them, written at once, and every reply one
socket read brings is parsed by hiredis in one go. The connection comes from the store's pool,
which redis-py has connected, authenticated and named; the live tail reads its pub/sub
connection the same way (:mod:`streams.backends.redis_tail`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import hiredis
from hiredis import pack_command
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["exchange", "pack", "typed"]

#: Bytes asked of the socket per read.
READ_SIZE = 64 * 1024


async def exchange(pool: Any, commands: list[tuple[Any, ...]], timeout: float) -> list[Any]:
    """The replies to ``commands``, written at once on a connection of ``pool`` and read off its
    socket within ``timeout`` seconds (error replies as :class:`~redis.exceptions.ResponseError`
    objects; :func:`typed` gives them redis-py's classes). A connection that failed, or was left
    with a reply half read (a timeout, a cancelled caller), is closed before it goes back to the
    pool: a late reply is never read by the next command on it."""
    packed = pack(commands)  # a command that cannot be sent fails before a connection is taken
    connection: Any = await pool.get_connection()
    try:
        writer, socket = connection._writer, connection._reader
        if writer is None or socket is None or writer.is_closing():
            raise RedisConnectionError("the connection closed")
        parser = hiredis.Reader(replyError=ResponseError)
        replies: list[Any] = []
        try:
            async with asyncio.timeout(timeout):
                writer.write(packed)
                await writer.drain()
                while len(replies) < len(commands):
                    data = await socket.read(READ_SIZE)
                    if not data:
                        raise RedisConnectionError("Redis closed the connection")
                    parser.feed(data)
                    reply = parser.gets()
                    while reply is not False:
                        if type(reply) is not hiredis.PushNotification:  # RESP3 pushes answer nothing
                            replies.append(reply)
                        reply = parser.gets()
        except TimeoutError:
            raise RedisTimeoutError(f"no reply from Redis in {timeout} s") from None
        except hiredis.ProtocolError as exc:
            raise RedisConnectionError(f"protocol error: {exc}") from exc
        if parser.has_data():  # more than the replies (the start of a push): not for the next command
            await connection.disconnect()
        return replies
    except BaseException:
        with contextlib.suppress(Exception):
            await connection.disconnect()
        raise
    finally:
        await pool.release(connection)


def pack(commands: list[tuple[Any, ...]]) -> bytes:
    """``commands`` in RESP, as one buffer; arguments are ``bytes``, ``str`` (UTF-8), ``int`` or
    ``float``, anything else a :class:`TypeError`. Each command is packed by hiredis, in C:
    redis-py's packer, built for every type it accepts, took a tenth of a storm's CPU, and one
    written in Python still a few µs a page read."""
    return b"".join([pack_command(command) for command in commands])


def typed(reply: Any) -> Any:
    """An error reply as the exception class redis-py gives it (``NOPERM`` a NoPermissionError,
    ``LOADING`` a BusyLoadingError, which is a ConnectionError: Redis is not ready yet); any other
    reply as it is."""
    if isinstance(reply, ResponseError):
        return BaseParser.parse_error(str(reply))  # type: ignore[no-untyped-call]
    return reply
