"""The Redis stream store, on Redis Streams (entry id = sequence) and Lua for atomicity.

Writes, status changes and reads are Lua scripts (``redis_scripts``): a batch of chunks gets its
sequences, is stored and is announced in one atomic step, and a write to a closed stream stores
nothing. Live tailing goes through one shared pub/sub connection per process and event loop
(``redis_tail``). Clients are created lazily, one pool per event loop, so the manager works from
Daphne's loop, ``asyncio.run`` in a worker and test loops alike. The client never retries a
command by itself (a blindly retried write could be stored twice). Here, reads are retried, and
so are writes that carry a writer's batch token (the script stores a batch once, however often
it is sent), status changes and fences, for up to ``retry_timeout`` seconds: a Redis restart
pauses the writers instead of failing their runs. Past that,
:class:`~streams.exceptions.StreamUnavailableError` reaches the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import msgspec
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

import streams.backends.redis_scripts as redis_scripts
from streams.backends.base import StreamManager
from streams.backends.readers import Subscription
from streams.backends.records import TERMINAL, ReadPage, StreamInfo, StreamStatus, WriteBatch, validate_stream_id
from streams.backends.redis_reads import PageReads
from streams.backends.redis_tail import TailHub, TailSubscription
from streams.backends.redis_wire import exchange, typed
from streams.backoff import Backoff, retry
from streams.exceptions import (
    ConfigurationError,
    StreamClosedError,
    StreamNotFoundError,
    StreamSupersededError,
    StreamUnavailableError,
)
from streams.protocol import StoredChunk, decode_chunks, now_ms, stored_chunks

__all__ = ["RedisStreamManager"]


def _raw_reply(response: Any, **options: Any) -> Any:
    return response


T = TypeVar("T")
_NETWORK_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)


@dataclass(slots=True)
class _LoopState:
    client: Redis
    hub: TailHub
    reads: PageReads
    ensure: AsyncScript
    open: AsyncScript
    append: AsyncScript
    transition: AsyncScript
    delete: AsyncScript
    fence: AsyncScript


class RedisStreamManager(StreamManager):
    """Streams in Redis, shared by every web process and worker.

    Options: ``url`` (``redis://…``), ``key_prefix`` (default ``helix:stream:``), ``ttl`` seconds
    an ended or failed stream is kept (default one day), ``active_ttl`` seconds an untouched
    active stream is kept (default a week; ``None``: forever), ``max_length`` chunks kept per
    stream (approximate, oldest first; ``None``: all), ``max_connections`` per process and event
    loop, the tail's pub/sub connection included (default 4), ``retry_timeout`` seconds a reader
    keeps retrying an unreachable Redis before it raises (default 30), ``socket_timeout`` seconds.

    ``client``: a ``redis.asyncio.Redis`` of the site's instead of ``url`` (its pool, its TLS and
    credentials, its connection limit); Helix uses the client's pool on the event loop the client
    serves and leaves the pool open when it closes.
    """

    option_names: ClassVar[frozenset[str]] = frozenset(
        {"url", "key_prefix", "ttl", "active_ttl", "max_length", "max_connections", "retry_timeout", "socket_timeout"}
    )

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        key_prefix: str = "helix:stream:",
        ttl: float = 86_400,
        active_ttl: float | None = 7 * 86_400,
        max_length: int | None = None,
        max_connections: int = 4,
        retry_timeout: float = 30.0,
        socket_timeout: float = 10.0,
        client: Redis | None = None,
    ) -> None:
        self.url = url
        self._client = client
        self.key_prefix = key_prefix
        self.ttl = ttl
        self.active_ttl = active_ttl
        self.max_length = max_length
        self.max_connections = max(2, max_connections)
        self.retry_timeout = retry_timeout
        self.socket_timeout = socket_timeout
        self.client_name = f"helix-streams-{os.getpid()}"
        self._key_cache: dict[str, list[str]] = {}
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = weakref.WeakKeyDictionary()

    # -- plumbing ----------------------------------------------------------------------------

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None and self._client is not None:
            if self._states:
                raise ConfigurationError(
                    "A RedisStreamManager given a client serves the event loop that client is used on: "
                    "give a url to serve several loops"
                )
            # A client of its own on the site's pool: the reply callbacks set below stay Helix's.
            state = self._new_state(Redis(connection_pool=self._client.connection_pool))
            self._states[loop] = state
        if state is None:
            pool = BlockingConnectionPool.from_url(
                self.url,
                max_connections=self.max_connections,
                timeout=self.socket_timeout,
                client_name=self.client_name,
                socket_timeout=self.socket_timeout,
                socket_connect_timeout=min(self.socket_timeout, 5.0),
                health_check_interval=30,
                socket_keepalive=True,  # notice a silently dead pub/sub connection
                retry=Retry(NoBackoff(), 0),
            )
            state = self._new_state(Redis(connection_pool=pool))
            self._states[loop] = state
        return state

    def _new_state(self, client: Redis) -> _LoopState:
        client.set_response_callback("XRANGE", _raw_reply)  # skip building a dict per entry
        return _LoopState(
            client=client,
            hub=TailHub(client, retry_timeout=self.retry_timeout),
            reads=PageReads(client, shared_up_to=self.page_size, timeout=self.socket_timeout),
            ensure=client.register_script(redis_scripts.ENSURE),
            open=client.register_script(redis_scripts.OPEN),
            append=client.register_script(redis_scripts.append_script(self._ms(self.active_ttl), self.max_length)),
            transition=client.register_script(redis_scripts.TRANSITION),
            delete=client.register_script(redis_scripts.DELETE),
            fence=client.register_script(redis_scripts.FENCE),
        )

    def _keys(self, stream_id: str) -> list[str]:
        keys = self._key_cache.get(stream_id)
        if keys is None:
            if len(self._key_cache) > 10_000:
                self._key_cache.clear()
            base = f"{self.key_prefix}{{{stream_id}}}"
            keys = self._key_cache[stream_id] = [f"{base}:c", f"{base}:m", f"{base}:s"]
        return keys

    def _channel(self, stream_id: str) -> str:
        return f"{self.key_prefix}{{{stream_id}}}:n"

    def _ms(self, seconds: float | None) -> int:
        return 0 if not seconds else max(1, int(seconds * 1000))

    async def _call(self, stream_id: str, action: Callable[[], Awaitable[T]], epoch: int | None = None) -> T:
        """Run one Redis operation, mapping failures to typed errors. Redis out of memory
        (``maxmemory`` reached, no eviction) refuses writes until room is made: like Redis away,
        writes that are safe to repeat wait for it for a while."""
        try:
            return await action()
        except OutOfMemoryError as exc:
            raise StreamUnavailableError(stream_id, f"Redis is out of memory: {exc}") from exc
        except ResponseError as exc:
            message = str(exc)
            if message.startswith("HELIX_NOT_FOUND"):
                raise StreamNotFoundError(stream_id) from None
            if message.startswith("HELIX_CLOSED"):
                raise StreamClosedError(stream_id, message.split()[1]) from None
            if message.startswith("HELIX_SUPERSEDED"):
                parts = message.split(" ", 2)  # the stream's epoch, and its holder when that refused
                holder = parts[2] if len(parts) > 2 else None
                raise StreamSupersededError(stream_id, epoch, int(parts[1]), holder) from None
            raise
        except _NETWORK_ERRORS as exc:
            raise StreamUnavailableError(stream_id, f"Redis unreachable: {exc}") from exc

    async def _call_until_reachable(
        self, stream_id: str, action: Callable[[], Awaitable[T]], epoch: int | None = None
    ) -> T:
        """Like :meth:`_call`, retrying an operation that is safe to repeat (a tokened append, a
        status change, a fence) while Redis is unreachable, for up to ``retry_timeout`` seconds:
        a Redis restart costs a pause, not a failed run."""
        return await retry(
            lambda: self._call(stream_id, action, epoch), StreamUnavailableError, Backoff(timeout=self.retry_timeout)
        )

    async def _call_idempotent(self, stream_id: str, action: Callable[[], Awaitable[T]]) -> T:
        """Like :meth:`_call`, retrying a read a few times with backoff before giving up."""
        return await retry(lambda: self._call(stream_id, action), StreamUnavailableError, Backoff(cap=None, attempts=3))

    # -- backend hooks -----------------------------------------------------------------------

    async def _ensure_stream(self, stream_id: str) -> None:
        state = self._state()
        keys = self._keys(stream_id)
        # Safe to repeat (it creates the stream only if it is missing): a writer opened while Redis
        # restarts (a run starting, or one recording its failure) waits for it like a write does.
        await self._call_until_reachable(stream_id, lambda: state.ensure(keys, [now_ms(), self._ms(self.active_ttl)]))

    async def _open_stream(self, stream_id: str, holder: str) -> None:
        state = self._state()
        keys = self._keys(stream_id)
        args: list[str | int] = [holder, now_ms(), self._ms(self.active_ttl), self._channel(stream_id)]
        await self._call_until_reachable(stream_id, lambda: state.open(keys, args))

    async def _append(
        self, stream_id: str, batch: WriteBatch, epoch: int | None = None, holder: str | None = None
    ) -> int:
        state = self._state()
        args: list[Any] = [
            "" if epoch is None else epoch,
            holder or "",
            batch.token or "",
            now_ms(),
            len(batch.payloads),
        ]
        args += batch.payloads
        for step, index in batch.steps:
            args += (step, index)
        keys = self._keys(stream_id)
        call = self._call if batch.token is None else self._call_until_reachable
        return int(await call(stream_id, lambda: state.append(keys, args), epoch))

    async def fence(self, stream_id: str, epoch: int, *, holder: str | None = None) -> int:
        validate_stream_id(stream_id)
        state = self._state()
        keys = self._keys(stream_id)
        args: list[str | int] = [epoch, holder or ""]
        return int(await self._call_until_reachable(stream_id, lambda: state.fence(keys, args), epoch))

    async def _read_page(self, stream_id: str, after_sequence: int, limit: int) -> ReadPage | None:
        state = self._state()
        chunks_key, meta_key, _ = self._keys(stream_id)

        (status, latest, error), entries = await self._call_idempotent(
            stream_id, lambda: state.reads.read(chunks_key, meta_key, after_sequence, limit)
        )
        if status is None:
            return None
        stored: list[StoredChunk] = []
        nbytes = 0
        if entries:
            first = int(entries[0][0].partition(b"-")[0])
            payloads = [fields[1] for _, fields in entries]
            nbytes = sum(map(len, payloads))
            stored = stored_chunks(decode_chunks(payloads), first)
        return ReadPage(stored, status.decode(), int(latest), error.decode() if error else None, nbytes)

    async def _step_start(self, stream_id: str, step: int) -> int | None:
        state = self._state()
        key = self._keys(stream_id)[2]
        value = await self._call_idempotent(stream_id, lambda: state.client.hget(key, str(step)))
        return None if value is None else int(value)

    def _subscribe(self, stream_id: str) -> Subscription:
        state = self._state()
        return TailSubscription(state.hub, stream_id, self._channel(stream_id).encode())

    # -- lifecycle ---------------------------------------------------------------------------

    async def _positions(self, stream_ids: list[str]) -> dict[str, tuple[str, int] | None]:
        state = self._state()

        async def read() -> list[Any]:
            commands = [("HMGET", self._keys(stream_id)[1], "status", "seq") for stream_id in stream_ids]
            replies = [
                typed(reply) for reply in await exchange(state.client.connection_pool, commands, self.socket_timeout)
            ]
            for reply in replies:
                if isinstance(reply, Exception):  # LOADING (Redis restarting) is a ConnectionError
                    raise reply
            return replies

        rows = await self._call(stream_ids[0] if stream_ids else "", read)
        return {
            stream_id: (status.decode(), int(seq)) if isinstance(status, bytes) and isinstance(seq, bytes) else None
            for stream_id, (status, seq) in zip(stream_ids, rows, strict=True)
        }

    async def get_stream_info(self, stream_id: str) -> StreamInfo | None:
        validate_stream_id(stream_id)
        state = self._state()
        key = self._keys(stream_id)[1]
        fields = ("status", "seq", "error", "output", "created", "updated", "epoch", "holder")
        values = await self._call_idempotent(stream_id, lambda: state.client.hmget(key, fields))
        status, seq, error, output, created, updated, epoch, holder = (
            v if isinstance(v, bytes) else None for v in values
        )
        if status is None or seq is None:
            return None
        return StreamInfo(
            stream_id=stream_id,
            status=status.decode(),  # type: ignore[arg-type]
            total_chunks=int(seq),
            latest_sequence=int(seq),
            error=error.decode() if error else None,
            output=msgspec.json.decode(output) if output else None,
            created_at=int(created) if created else None,
            updated_at=int(updated) if updated else None,
            epoch=int(epoch) if epoch else 0,
            holder=holder.decode() if holder else None,
        )

    async def _transition(
        self,
        stream_id: str,
        target: StreamStatus,
        allowed: tuple[str, ...],
        field: str = "",
        value: bytes | str = "",
        clear: bool = False,
        epoch: int | None = None,
        holder: str | None = None,
    ) -> None:
        state = self._state()
        ttl = self.ttl if target in TERMINAL else self.active_ttl
        args: list[bytes | str | int] = [
            "" if epoch is None else epoch,
            holder or "",
            target,
            "," + ",".join(allowed) + ",",
            now_ms(),
            self._ms(ttl),
            self._channel(stream_id),
            field,
            value,
            "1" if clear else "0",
        ]
        keys = self._keys(stream_id)
        await self._call_until_reachable(stream_id, lambda: state.transition(keys, args), epoch)

    async def end_stream(
        self, stream_id: str, output: Any = None, *, epoch: int | None = None, holder: str | None = None
    ) -> None:
        encoded = msgspec.json.encode(output) if output is not None else b""
        field = "output" if encoded else ""
        await self._transition(stream_id, "ended", ("active", "paused"), field, encoded, epoch=epoch, holder=holder)

    async def fail_stream(
        self, stream_id: str, error: str, *, epoch: int | None = None, holder: str | None = None
    ) -> None:
        allowed = ("active", "paused")
        await self._transition(stream_id, "failed", allowed, "error", str(error), epoch=epoch, holder=holder)

    async def pause_stream(self, stream_id: str, *, epoch: int | None = None, holder: str | None = None) -> None:
        await self._transition(stream_id, "paused", ("active",), epoch=epoch, holder=holder)

    async def resume_stream(self, stream_id: str, *, epoch: int | None = None, holder: str | None = None) -> None:
        await self._transition(stream_id, "active", ("paused",), epoch=epoch, holder=holder)

    async def reopen_stream(self, stream_id: str) -> None:
        await self._transition(stream_id, "active", ("ended", "failed", "paused"), clear=True)

    async def delete_stream(self, stream_id: str) -> bool:
        validate_stream_id(stream_id)
        state = self._state()
        keys = self._keys(stream_id)
        removed = await self._call(stream_id, lambda: state.delete(keys, [self._channel(stream_id)]))
        return int(removed) > 0

    def _alive_key(self, run_id: str) -> str:
        return f"{self.key_prefix}alive:{run_id}"

    async def mark_alive(self, run_ids: list[str], seconds: float) -> None:
        state = self._state()

        async def mark() -> None:
            pipe = state.client.pipeline(transaction=False)
            for run_id in run_ids:
                pipe.set(self._alive_key(run_id), b"1", px=self._ms(seconds))
            await pipe.execute()

        await self._call("-", mark)

    async def alive(self, run_ids: list[str]) -> set[str]:
        if not run_ids:
            return set()
        state = self._state()

        async def read() -> list[Any]:
            pipe = state.client.pipeline(transaction=False)  # GETs, not MGET: keys of any slot
            for run_id in run_ids:
                pipe.exists(self._alive_key(run_id))
            return list(await pipe.execute())

        marks = await self._call_idempotent("-", read)
        return {run_id for run_id, mark in zip(run_ids, marks, strict=True) if mark}

    async def ping(self) -> bool:
        """True when Redis answers."""
        state = self._state()
        return bool(await self._call("-", lambda: state.client.ping()))

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        state = self._states.pop(loop, None)
        if state is not None:
            await state.hub.aclose()
            with contextlib.suppress(Exception):
                # A pool that came with a given client is its owner's to close.
                await state.client.aclose(close_connection_pool=self._client is None)
