"""The shared live tail of the Redis store: one pub/sub connection per process and event loop.

Every tailing reader of the process registers here. The hub subscribes to the change channel of
each stream that has readers, over a single connection, and hands each notification to those
readers: chunk batches are decoded once and pushed to all of them; status changes and anything
it cannot vouch for (a reconnect, an overflowing reader) make readers read the store again from
the last sequence they delivered. So N tailing readers cost one connection plus the command pool,
and a lost notification costs a re-read, never a gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from streams.backends.readers import Subscription
from streams.backends.redis_wire import pack
from streams.backoff import Backoff
from streams.exceptions import StreamUnavailableError
from streams.protocol import StoredChunk, decode_chunks, stored_chunks

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.connection import Connection

__all__ = ["TailHub"]

logger = logging.getLogger("streams.redis")

_REREAD = None  # pushed to a subscription: read the store again
_NETWORK_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)


class TailSubscription(Subscription):
    """One reader's mailbox at the hub. A reconnect storm leaves thousands of them waiting, so a
    mailbox holds no event objects of its own: one future while its reader waits."""

    max_backlog = 256

    def __init__(self, hub: TailHub, stream_id: str, channel: bytes) -> None:
        self.hub = hub
        self.stream_id = stream_id
        self.channel = channel
        self._items: deque[list[StoredChunk] | BaseException | None] = deque()
        self._waiter: asyncio.Future[None] | None = None  # while its reader waits
        self.live = False  # its channel's subscription was confirmed
        self._closed = False

    async def ready(self) -> None:
        self.hub.attach(self)
        while not self.live and not self._failed():
            await self._sleep()
        self._raise_if_error()

    async def _sleep(self) -> None:
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _failed(self) -> bool:
        return bool(self._items) and isinstance(self._items[0], BaseException)

    def _raise_if_error(self) -> None:
        if self._failed():
            raise self._items.popleft()  # type: ignore[misc]

    def subscribed(self) -> None:
        """The channel is (again) subscribed: notifications from now on will arrive."""
        if self.live:
            self.push(_REREAD)  # we may have missed some while the connection was down
        else:
            self.live = True
            self._wake()

    def push(self, item: list[StoredChunk] | BaseException | None) -> None:
        if isinstance(item, BaseException):
            self._items.appendleft(item)
        elif len(self._items) >= self.max_backlog:
            self._items.clear()  # a slow reader: drop the backlog, it re-reads from the store
            self._items.append(_REREAD)
        else:
            self._items.append(item)
        self._wake()

    async def wait(self) -> list[StoredChunk] | None:
        while not self._items:
            await self._sleep()
        self._raise_if_error()
        return self._items.popleft()  # type: ignore[return-value]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.hub.detach(self)

    def nudge(self) -> None:
        self.push(_REREAD)


async def _write(connection: Connection, *args: Any) -> None:
    """Send a command on the hub's connection, straight to its socket. redis-py's
    ``send_command`` would reconnect a closed connection (one the hub has dropped, perhaps back in
    the pool) and run its own health check, which reads the reply the hub's listener waits for."""
    writer = connection._writer
    if writer is None or writer.is_closing():
        raise RedisConnectionError("the pub/sub connection closed")
    writer.write(pack([args]))
    await writer.drain()


class _Health:
    """The health check of a pub/sub connection: a ``PING`` after an interval in which nothing
    was read, and the connection closed (its read ends) after a second silent one. One timer an
    interval, not one per read."""

    def __init__(self, connection: Connection, interval: float) -> None:
        self.connection = connection
        self.interval = interval
        self.reads = 0  # counted by the listener
        self.silent = False
        self._seen = 0
        self._pinged = False
        self._ping: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(interval, self._check)

    def _check(self) -> None:
        if self.reads != self._seen:
            self._seen, self._pinged = self.reads, False
        elif not self._pinged:
            self._pinged = True
            self._ping = asyncio.ensure_future(self._send_ping())
        else:
            self.silent = True
            writer = self.connection._writer
            if writer is not None:
                writer.transport.abort()  # the listener's read ends, and it reconnects
            return
        self._timer = asyncio.get_running_loop().call_later(self.interval, self._check)

    async def _send_ping(self) -> None:
        with contextlib.suppress(Exception):  # a failed write ends the read too
            await _write(self.connection, "PING")

    def stop(self) -> None:
        self._timer.cancel()
        if self._ping is not None:
            self._ping.cancel()


class TailHub:
    """Fans the change notifications of one pub/sub connection out to the readers of a loop.

    The connection is one of the store's pool, taken for good and subscribed by hand: replies are
    read off its socket as they come, as many as one read brings, each parsed by hiredis and
    handed out on the spot. redis-py's ``PubSub`` reads one message per call, through its retry,
    timeout and dict-building layers: at thousands of notifications a second, that was a quarter
    of a live stream's CPU. Health checks are the hub's own (:class:`_Health`): a check every
    ``health_check_interval`` seconds sends a ``PING`` when nothing was read since the last one,
    and takes the connection for dead and replaces it when the next finds no answer either
    (every reader then re-reads the store).
    """

    #: Seconds of silence after which the connection is pinged (and after another, dropped).
    health_check_interval = 30.0
    #: Seconds the connection is kept once its last reader has left: the next stream to go live
    #: then subscribes on it, instead of connecting (a round trip and a handshake more before its
    #: first live event, and a connection opened and closed per stream on a quiet process).
    idle_linger = 10.0
    read_size = 1 << 16

    def __init__(self, client: Redis, *, retry_timeout: float) -> None:
        self._client = client
        self._retry_timeout = retry_timeout
        self._subscriptions: dict[bytes, set[TailSubscription]] = {}
        self._connection: Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._commands: set[asyncio.Future[None]] = set()
        self._asked: list[tuple[str, bytes]] = []  # (un)subscribes not sent yet
        self._lock = asyncio.Lock()
        self._linger: asyncio.TimerHandle | None = None  # while no reader tails: when to let go

    def attach(self, subscription: TailSubscription) -> None:
        self._stop_lingering()
        subscribers = self._subscriptions.setdefault(subscription.channel, set())
        subscribers.add(subscription)
        if len(subscribers) == 1:
            self._ask("SUBSCRIBE", subscription.channel)
        elif len(subscribers) > 1 and any(s.live for s in subscribers if s is not subscription):
            subscription.subscribed()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    def detach(self, subscription: TailSubscription) -> None:
        subscribers = self._subscriptions.get(subscription.channel)
        if subscribers is None:
            return
        subscribers.discard(subscription)
        if subscribers:
            return
        del self._subscriptions[subscription.channel]
        if self._task is None:  # closed
            return
        self._ask("UNSUBSCRIBE", subscription.channel)
        if not self._subscriptions:  # nothing left to tail: the connection waits for the next stream
            self._linger = asyncio.get_running_loop().call_later(self.idle_linger, self._let_go)

    def _stop_lingering(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    def _let_go(self) -> None:
        """Give the connection back: no reader has tailed for ``idle_linger`` seconds."""
        self._linger = None
        if not self._subscriptions and self._task is not None:
            self._task.cancel()
            self._task = None

    def _ask(self, command: str, channel: bytes) -> None:
        """Queue a (un)subscribe; those of one loop iteration go out together, in order."""
        if not self._asked:
            task = asyncio.ensure_future(self._send_asked())
            self._commands.add(task)
            task.add_done_callback(self._commands.discard)
        self._asked.append((command, channel))

    async def _send_asked(self) -> None:
        await asyncio.sleep(0)  # a reconnect storm's thousands of subscribes: a few commands
        async with self._lock:  # not while the connection is being (re)made: it subscribes to all
            asked, self._asked = self._asked, []
            connection = self._connection
            # Consecutive asks of one command become one command with all their channels.
            for command, group in itertools.groupby(asked, key=lambda ask: ask[0]):
                channels = [channel for _, channel in group]
                if connection is None or connection is not self._connection:
                    return  # dropped: the next (re)connect subscribes every channel
                try:
                    await _write(connection, command, *channels)
                except Exception:  # the listener owns recovery and resubscribes everything
                    logger.debug(
                        "pub/sub %s of %d channels failed; the listener will resubscribe", command, len(channels)
                    )

    def _dispatch(self, reply: Any) -> None:
        """Hand one pub/sub reply (``[kind, channel, payload]``) to the readers it concerns."""
        if isinstance(reply, Exception):  # Redis refused us (an ACL, say): a new connection
            raise RedisConnectionError(f"pub/sub connection refused: {reply}")
        if not isinstance(reply, list) or len(reply) != 3:
            return  # a PING's reply
        kind, channel, data = reply
        subscribers = self._subscriptions.get(channel)
        if not subscribers:
            return
        if kind == b"subscribe":
            for subscription in list(subscribers):
                subscription.subscribed()
            return
        if kind != b"message":
            return
        if data[:1] == b"!":
            for subscription in list(subscribers):
                subscription.push(_REREAD)
            return
        head, _, body = data.partition(b"\n")
        try:
            first = int(head)
            chunks = decode_chunks(body.split(b"\n"))
        except Exception:  # never trust a notification: re-read instead
            logger.exception("undecodable notification on %r", channel)
            for subscription in list(subscribers):
                subscription.push(_REREAD)
            return
        stored = stored_chunks(chunks, first)
        for subscription in list(subscribers):
            subscription.push(stored)

    async def _connect(self) -> Connection:
        """A connection of the pool, subscribed to every channel with readers."""
        pool = self._client.connection_pool
        async with self._lock:
            connection: Connection = await pool.get_connection()  # type: ignore[no-untyped-call]
            try:
                channels = list(self._subscriptions)
                # This SUBSCRIBE has every channel asked for so far, and a new connection has none
                # to unsubscribe: sent again, they would be subscribed twice, and their readers
                # told by the second confirmation to read their streams again for nothing.
                self._asked.clear()
                if channels:
                    await _write(connection, "SUBSCRIBE", *channels)
            except BaseException:
                await self._drop(connection)
                raise
            self._connection = connection
            return connection

    async def _drop(self, connection: Connection | None) -> None:
        """Close a pub/sub connection (never reused for commands) and give its slot back."""
        if connection is None:
            return
        if self._connection is connection:
            self._connection = None
        with contextlib.suppress(Exception):
            await connection.disconnect()
        with contextlib.suppress(Exception):
            await self._client.connection_pool.release(connection)

    async def _listen(self, connection: Connection, heard: Callable[[], None]) -> None:
        """Read ``connection`` until it fails (it raises), dispatching every reply."""
        socket = connection._reader  # the socket redis-py connected, authenticated and named
        if socket is None:
            raise RedisConnectionError("the pub/sub connection closed")
        parser = hiredis.Reader()
        health = _Health(connection, self.health_check_interval)
        try:
            while True:
                data = await socket.read(self.read_size)
                if not data:
                    if health.silent:
                        raise RedisTimeoutError("the pub/sub connection went silent")
                    raise RedisConnectionError("the pub/sub connection closed")
                health.reads += 1
                try:
                    parser.feed(data)
                    reply = parser.gets()
                    while reply is not False:
                        self._dispatch(reply)
                        reply = parser.gets()
                except hiredis.ProtocolError as exc:
                    raise RedisConnectionError(f"pub/sub protocol error: {exc}") from exc
                heard()  # after the replies: one Redis refused is no sign of health
        finally:
            health.stop()

    async def _run(self) -> None:
        backoff: Backoff | None = None  # while the connection is failing

        def heard() -> None:
            nonlocal backoff
            backoff = None

        connection: Connection | None = None
        try:
            while self._subscriptions:
                try:
                    connection = await self._connect()
                    await self._listen(connection, heard)
                except _NETWORK_ERRORS as exc:
                    await self._drop(connection)
                    connection = None
                    backoff = backoff or Backoff(timeout=self._retry_timeout)
                    delay = backoff.next_delay()
                    if delay is None:
                        self._fail_all(exc)
                        return
                    logger.warning("stream tail lost its Redis connection (%s); retrying", exc)
                    await asyncio.sleep(delay)
        finally:
            await self._drop(connection)

    def _fail_all(self, exc: BaseException) -> None:
        for channel, subscribers in list(self._subscriptions.items()):
            for subscription in list(subscribers):
                error = StreamUnavailableError(subscription.stream_id, f"Redis unreachable while tailing: {exc}")
                subscription.push(error)
            del self._subscriptions[channel]

    async def aclose(self) -> None:
        self._subscriptions.clear()
        self._stop_lingering()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._drop(self._connection)
