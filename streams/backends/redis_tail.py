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
from typing import TYPE_CHECKING, Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from streams.backends.readers import Subscription
from streams.backoff import Backoff
from streams.exceptions import StreamUnavailableError
from streams.protocol import StoredChunk, decode_chunks, stored_chunks

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.client import PubSub

__all__ = ["TailHub"]

logger = logging.getLogger("streams.redis")

_REREAD = None  # pushed to a subscription: read the store again
_NETWORK_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)


class TailSubscription(Subscription):
    """One reader's mailbox at the hub."""

    max_backlog = 256

    def __init__(self, hub: TailHub, stream_id: str, channel: bytes) -> None:
        self.hub = hub
        self.stream_id = stream_id
        self.channel = channel
        self._items: deque[list[StoredChunk] | BaseException | None] = deque()
        self._event = asyncio.Event()
        self._ready = asyncio.Event()
        self._closed = False

    async def ready(self) -> None:
        self.hub.attach(self)
        await self._ready.wait()
        self._raise_if_error()

    def _raise_if_error(self) -> None:
        if self._items and isinstance(self._items[0], BaseException):
            raise self._items.popleft()  # type: ignore[misc]

    def subscribed(self) -> None:
        """The channel is (again) subscribed: notifications from now on will arrive."""
        if self._ready.is_set():
            self.push(_REREAD)  # we may have missed some while the connection was down
        else:
            self._ready.set()

    def push(self, item: list[StoredChunk] | BaseException | None) -> None:
        if isinstance(item, BaseException):
            self._items.appendleft(item)
            self._ready.set()
        elif len(self._items) >= self.max_backlog:
            self._items.clear()  # a slow reader: drop the backlog, it re-reads from the store
            self._items.append(_REREAD)
        else:
            self._items.append(item)
        self._event.set()

    async def wait(self) -> list[StoredChunk] | None:
        while not self._items:
            self._event.clear()
            await self._event.wait()
        self._raise_if_error()
        return self._items.popleft()  # type: ignore[return-value]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.hub.detach(self)

    def nudge(self) -> None:
        self.push(_REREAD)


class TailHub:
    """Fans the change notifications of one pub/sub connection out to the readers of a loop."""

    def __init__(self, client: Redis, *, retry_timeout: float) -> None:
        self._client = client
        self._retry_timeout = retry_timeout
        self._subscriptions: dict[bytes, set[TailSubscription]] = {}
        self._pubsub: PubSub | None = None
        self._task: asyncio.Task[None] | None = None
        self._commands: set[asyncio.Future[None]] = set()
        self._asked: list[tuple[str, bytes]] = []  # (un)subscribes not sent yet
        self._lock = asyncio.Lock()

    def attach(self, subscription: TailSubscription) -> None:
        subscribers = self._subscriptions.setdefault(subscription.channel, set())
        subscribers.add(subscription)
        if len(subscribers) == 1:
            self._ask("subscribe", subscription.channel)
        elif len(subscribers) > 1 and any(s._ready.is_set() for s in subscribers if s is not subscription):
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
        if self._subscriptions:
            self._ask("unsubscribe", subscription.channel)
        elif self._task is not None:
            self._task.cancel()  # nothing left to tail: give the connection back
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
        async with self._lock:  # never two connects of one PubSub: each would take a connection
            asked, self._asked = self._asked, []
            pubsub = self._pubsub
            if pubsub is None or pubsub.connection is None:
                return  # the next (re)connect subscribes every channel
            # Consecutive asks of one command become one command with all their channels.
            for command, group in itertools.groupby(asked, key=lambda ask: ask[0]):
                channels = [channel for _, channel in group]
                try:
                    await getattr(pubsub, command)(*channels)
                except Exception:  # the listener owns recovery and resubscribes everything
                    logger.debug(
                        "pub/sub %s of %d channels failed; the listener will resubscribe", command, len(channels)
                    )

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind, channel = message["type"], message["channel"]
        subscribers = self._subscriptions.get(channel)
        if not subscribers:
            return
        if kind == "subscribe":
            for subscription in list(subscribers):
                subscription.subscribed()
            return
        if kind != "message":
            return
        data: bytes = message["data"]
        if data[:1] == b"!":
            for subscription in list(subscribers):
                subscription.push(_REREAD)
            return
        head, _, body = data.partition(b"\n")
        first = int(head)
        try:
            chunks = decode_chunks(body.split(b"\n"))
        except Exception:  # never trust a notification: re-read instead
            logger.exception("undecodable notification on %r", channel)
            for subscription in list(subscribers):
                subscription.push(_REREAD)
            return
        stored = stored_chunks(chunks, first)
        for subscription in list(subscribers):
            subscription.push(stored)

    async def _close_pubsub(self, pubsub: PubSub | None) -> None:
        if pubsub is None:
            return
        if self._pubsub is pubsub:
            self._pubsub = None
        with contextlib.suppress(Exception):
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _run(self) -> None:
        backoff: Backoff | None = None  # while the connection is failing
        pubsub: PubSub | None = None
        try:
            while self._subscriptions:
                try:
                    if pubsub is None:
                        async with self._lock:
                            pubsub = self._pubsub = self._client.pubsub()
                            await pubsub.subscribe(*self._subscriptions)
                    message = await pubsub.get_message(timeout=None)
                    backoff = None
                    if message is not None:
                        self._dispatch(message)
                except _NETWORK_ERRORS as exc:
                    await self._close_pubsub(pubsub)
                    pubsub = None
                    backoff = backoff or Backoff(timeout=self._retry_timeout)
                    delay = backoff.next_delay()
                    if delay is None:
                        self._fail_all(exc)
                        return
                    logger.warning("stream tail lost its Redis connection (%s); retrying", exc)
                    await asyncio.sleep(delay)
        finally:
            await self._close_pubsub(pubsub)

    def _fail_all(self, exc: BaseException) -> None:
        for channel, subscribers in list(self._subscriptions.items()):
            for subscription in list(subscribers):
                error = StreamUnavailableError(subscription.stream_id, f"Redis unreachable while tailing: {exc}")
                subscription.push(error)
            del self._subscriptions[channel]

    async def aclose(self) -> None:
        self._subscriptions.clear()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._close_pubsub(self._pubsub)
