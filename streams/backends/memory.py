"""The in-memory stream store: a complete backend for one process (the embedded default).

Streams live in a dict guarded by a lock, so producers and readers may run on different event
loops or threads of the process (an in-process run next to Daphne's loop, a sync view's
``async_to_sync``). Readers wait on futures woken with ``call_soon_threadsafe``; there is no
polling. Ended and failed streams expire after ``ttl`` seconds; ``cleanup()`` sweeps them and
reads skip them.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar

from streams.backends.base import StreamManager
from streams.backends.readers import Subscription
from streams.backends.records import TERMINAL, ReadPage, StreamInfo, StreamStatus, WriteBatch, validate_stream_id
from streams.exceptions import (
    StreamClosedError,
    StreamNotFoundError,
    StreamSupersededError,
)
from streams.protocol import Chunk, StoredChunk, now_ms, stored_chunks

__all__ = ["InMemoryStreamManager"]


@dataclass(slots=True)
class _Stream:
    created_at: int
    updated_at: int
    status: StreamStatus = "active"
    chunks: deque[Chunk] = field(default_factory=deque)
    first_sequence: int = 1  # sequence of chunks[0]; grows when max_length trims
    sequence: int = 0
    error: str | None = None
    output: Any = None
    steps: dict[int, int] = field(default_factory=dict)
    epoch: int = 0
    holder: str | None = None
    expires_at: float | None = None
    subscribers: set[_MemorySubscription] = field(default_factory=set)


class _MemorySubscription(Subscription):
    """Wakes its reader's loop whenever the stream changes."""

    def __init__(self, manager: InMemoryStreamManager, stream_id: str) -> None:
        self._manager = manager
        self._stream_id = stream_id
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    async def ready(self) -> None:
        with self._manager._lock:
            stream = self._manager._streams.get(self._stream_id)
            if stream is not None:
                stream.subscribers.add(self)

    def notify(self) -> None:
        """Called with the manager's lock held, from any thread."""
        try:
            self._loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:  # its loop is closed: the reader is gone
            pass

    async def wait(self) -> list[StoredChunk] | None:
        await self._event.wait()
        self._event.clear()
        return None

    def nudge(self) -> None:
        self._event.set()

    def close(self) -> None:
        with self._manager._lock:
            stream = self._manager._streams.get(self._stream_id)
            if stream is not None:
                stream.subscribers.discard(self)


class InMemoryStreamManager(StreamManager):
    """Streams held in this process's memory.

    ``ttl``: seconds an ended or failed stream is kept (default one day). ``active_ttl``:
    seconds an active or paused stream is kept after its last write (``None``: forever).
    ``max_length``: chunks kept per stream, oldest dropped first (``None``: all).
    """

    option_names: ClassVar[frozenset[str]] = frozenset({"ttl", "active_ttl", "max_length"})

    def __init__(
        self, *, ttl: float = 86_400, active_ttl: float | None = 7 * 86_400, max_length: int | None = None
    ) -> None:
        self.ttl = ttl
        self.active_ttl = active_ttl
        self.max_length = max_length
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._alive: dict[str, float] = {}  # run id → when its mark lapses (monotonic)

    # -- helpers (call with the lock held) ------------------------------------------------------

    def _get(self, stream_id: str) -> _Stream | None:
        stream = self._streams.get(stream_id)
        if stream is not None and stream.expires_at is not None and stream.expires_at <= time.monotonic():
            self._drop(stream_id, stream)
            return None
        return stream

    def _drop(self, stream_id: str, stream: _Stream) -> None:
        del self._streams[stream_id]
        for subscriber in stream.subscribers:
            subscriber.notify()

    def _touch(self, stream: _Stream) -> None:
        stream.updated_at = now_ms()
        if stream.status in TERMINAL:
            stream.expires_at = time.monotonic() + self.ttl
        elif self.active_ttl is not None:
            stream.expires_at = time.monotonic() + self.active_ttl
        for subscriber in stream.subscribers:
            subscriber.notify()

    def _require(self, stream_id: str) -> _Stream:
        stream = self._get(stream_id)
        if stream is None:
            raise StreamNotFoundError(stream_id)
        return stream

    def cleanup(self) -> int:
        """Remove expired streams now; return how many were removed."""
        with self._lock:
            expired = [
                sid for sid, s in self._streams.items() if s.expires_at is not None and s.expires_at <= time.monotonic()
            ]
            for stream_id in expired:
                self._drop(stream_id, self._streams[stream_id])
            return len(expired)

    # -- backend hooks -----------------------------------------------------------------------

    async def _ensure_stream(self, stream_id: str) -> None:
        with self._lock:
            if self._get(stream_id) is None:
                now = now_ms()
                stream = _Stream(created_at=now, updated_at=now)
                self._streams[stream_id] = stream
                self._touch(stream)

    async def _open_stream(self, stream_id: str, holder: str) -> None:
        with self._lock:
            stream = self._get(stream_id)
            if stream is None:
                now = now_ms()
                stream = self._streams[stream_id] = _Stream(created_at=now, updated_at=now)
            elif stream.status != "active":
                stream.status = "active"
                stream.error = stream.output = None
            stream.holder = holder
            self._touch(stream)

    @staticmethod
    def _check_fence(stream_id: str, stream: _Stream, epoch: int | None, holder: str | None) -> None:
        """Refuse an operation made for another holder or with an older epoch (nothing changed)."""
        if holder is not None and stream.holder is not None and holder != stream.holder:
            raise StreamSupersededError(stream_id, epoch, stream.epoch, stream.holder)
        if epoch is not None and epoch < stream.epoch:
            raise StreamSupersededError(stream_id, epoch, stream.epoch)

    @staticmethod
    def _take_epoch(stream: _Stream, epoch: int | None) -> None:
        if epoch is not None and epoch > stream.epoch:
            stream.epoch = epoch

    async def fence(self, stream_id: str, epoch: int, *, holder: str | None = None) -> int:
        with self._lock:
            stream = self._require(stream_id)
            self._check_fence(stream_id, stream, epoch, holder)
            self._take_epoch(stream, epoch)
            return stream.sequence

    async def _append(
        self, stream_id: str, batch: WriteBatch, epoch: int | None = None, holder: str | None = None
    ) -> int:
        with self._lock:
            stream = self._require(stream_id)
            self._check_fence(stream_id, stream, epoch, holder)
            if stream.status in TERMINAL:
                raise StreamClosedError(stream_id, stream.status)
            self._take_epoch(stream, epoch)
            base = stream.sequence
            for step, index in batch.steps:
                stream.steps[step] = base + index + 1
            stream.chunks.extend(batch.chunks)
            stream.sequence = base + len(batch.chunks)
            if self.max_length is not None:
                while len(stream.chunks) > self.max_length:
                    stream.chunks.popleft()
                    stream.first_sequence += 1
            self._touch(stream)
            return stream.sequence

    async def _read_page(self, stream_id: str, after_sequence: int, limit: int) -> ReadPage | None:
        with self._lock:
            stream = self._get(stream_id)
            if stream is None:
                return None
            start = max(after_sequence + 1, stream.first_sequence)
            stop = min(stream.sequence, start + limit - 1)
            offset = start - stream.first_sequence
            chunks = list(itertools.islice(stream.chunks, offset, offset + stop - start + 1))
            return ReadPage(stored_chunks(chunks, start), stream.status, stream.sequence, stream.error)

    async def _step_start(self, stream_id: str, step: int) -> int | None:
        with self._lock:
            stream = self._get(stream_id)
            return None if stream is None else stream.steps.get(step)

    async def mark_alive(self, run_ids: list[str], seconds: float) -> None:
        until = time.monotonic() + seconds
        with self._lock:
            now = time.monotonic()
            for run_id in [r for r, lapses in self._alive.items() if lapses <= now]:
                del self._alive[run_id]
            self._alive.update(dict.fromkeys(run_ids, until))

    async def alive(self, run_ids: list[str]) -> set[str]:
        now = time.monotonic()
        with self._lock:
            return {run_id for run_id in run_ids if self._alive.get(run_id, 0.0) > now}

    def _subscribe(self, stream_id: str) -> Subscription:
        return _MemorySubscription(self, stream_id)

    # -- lifecycle ---------------------------------------------------------------------------

    async def get_stream_info(self, stream_id: str) -> StreamInfo | None:
        validate_stream_id(stream_id)
        with self._lock:
            stream = self._get(stream_id)
            if stream is None:
                return None
            return StreamInfo(
                stream_id=stream_id,
                status=stream.status,
                total_chunks=stream.sequence,
                latest_sequence=stream.sequence,
                error=stream.error,
                output=stream.output,
                created_at=stream.created_at,
                updated_at=stream.updated_at,
                epoch=stream.epoch,
                holder=stream.holder,
            )

    def _transition(
        self,
        stream_id: str,
        target: StreamStatus,
        allowed: frozenset[str],
        epoch: int | None = None,
        holder: str | None = None,
    ) -> _Stream | None:
        """Move the stream to ``target``; ``None`` when it already is there (a no-op)."""
        stream = self._require(stream_id)
        self._check_fence(stream_id, stream, epoch, holder)
        self._take_epoch(stream, epoch)
        if stream.status == target:
            return None
        if stream.status not in allowed:
            raise StreamClosedError(stream_id, stream.status)
        stream.status = target
        return stream

    async def end_stream(
        self, stream_id: str, output: Any = None, *, epoch: int | None = None, holder: str | None = None
    ) -> None:
        with self._lock:
            stream = self._transition(stream_id, "ended", frozenset({"active", "paused"}), epoch, holder)
            if stream is not None:
                stream.output = output
                self._touch(stream)

    async def fail_stream(
        self, stream_id: str, error: str, *, epoch: int | None = None, holder: str | None = None
    ) -> None:
        with self._lock:
            stream = self._transition(stream_id, "failed", frozenset({"active", "paused"}), epoch, holder)
            if stream is not None:
                stream.error = str(error)
                self._touch(stream)

    async def pause_stream(self, stream_id: str, *, epoch: int | None = None, holder: str | None = None) -> None:
        with self._lock:
            stream = self._transition(stream_id, "paused", frozenset({"active"}), epoch, holder)
            if stream is not None:
                self._touch(stream)

    async def resume_stream(self, stream_id: str, *, epoch: int | None = None, holder: str | None = None) -> None:
        with self._lock:
            stream = self._transition(stream_id, "active", frozenset({"paused"}), epoch, holder)
            if stream is not None:
                self._touch(stream)

    async def reopen_stream(self, stream_id: str) -> None:
        with self._lock:
            stream = self._transition(stream_id, "active", frozenset({"ended", "failed", "paused"}))
            if stream is not None:
                stream.error = stream.output = None
                self._touch(stream)

    async def delete_stream(self, stream_id: str) -> bool:
        with self._lock:
            stream = self._get(stream_id)
            if stream is None:
                return False
            self._drop(stream_id, stream)
            return True
