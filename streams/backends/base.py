"""The stream store interface every backend implements, and the parts they share.

A *stream* is an append-only log of chunks addressed by a stream id (a chat session id). The store
gives each chunk a sequence number (1, 2, 3, … with no gap), keeps the stream's status
(``active`` ⇄ ``paused`` → ``ended`` | ``failed``), and serves the chunks to any number of readers,
live. Writers and readers live in this module; backends supply storage through a handful of
private hooks (``_ensure_stream``, ``_append``, ``_read_page``, ``_wait``).
"""

from __future__ import annotations

import abc
import asyncio
import re
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from streams.exceptions import (
    SequenceExpiredError,
    StreamNotFoundError,
    StreamUnavailableError,
    ValidationError,
    WriterClosedError,
)
from streams.protocol import Chunk, StoredChunk, encode_chunk, now_ms

__all__ = [
    "ReadPage",
    "ResumableStreamReader",
    "StreamInfo",
    "StreamManager",
    "StreamReader",
    "StreamStatus",
    "StreamWriter",
    "Subscription",
    "WriteBatch",
]

StreamStatus = Literal["active", "paused", "ended", "failed"]
TERMINAL: frozenset[str] = frozenset({"ended", "failed"})

_STREAM_ID = re.compile(r"[^\s{}]{1,200}")


def validate_stream_id(stream_id: object) -> str:
    """Return ``stream_id`` if usable: 1-200 characters, no whitespace or braces."""
    if not isinstance(stream_id, str) or not _STREAM_ID.fullmatch(stream_id):
        raise ValidationError(f"Invalid stream id {stream_id!r}: use 1-200 characters, no spaces or braces")
    return stream_id


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """Where a stream stands. ``total_chunks`` counts every chunk ever written to it."""

    stream_id: str
    status: StreamStatus
    total_chunks: int
    latest_sequence: int
    error: str | None = None
    output: Any = None
    created_at: int | None = None
    updated_at: int | None = None
    epoch: int = 0


@dataclass(slots=True)
class WriteBatch:
    """Validated chunks stored in one atomic operation, plus step marks.

    ``steps`` holds ``(step, index)`` pairs: step ``step`` begins with the chunk at ``index`` of
    this batch (``index == len(chunks)`` means: with the next chunk written after the batch).
    """

    chunks: list[Chunk] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    steps: list[tuple[int, int]] = field(default_factory=list)
    #: ``<writer>:<n>``, set by the writer: lets a backend retry the append without doubling it.
    token: str | None = None


@dataclass(slots=True)
class ReadPage:
    """What a backend returns for one read: chunks after a position, and the stream's state then."""

    chunks: list[StoredChunk]
    status: StreamStatus
    latest_sequence: int
    error: str | None = None


class StreamManager(abc.ABC):
    """The stream store. Backends subclass it; see ``streams.backends`` for choosing one."""

    #: Options a backend accepts from ``HELIX["STREAMS"]["OPTIONS"]``, checked by system checks.
    option_names: ClassVar[frozenset[str]] = frozenset()

    #: Chunks a reader fetches per round trip (small pages: a resumed reader starts quickly).
    page_size: int = 1000
    #: Chunks fetched per round trip by ``get_chunks_from_sequence`` and friends.
    bulk_page_size: int = 10_000
    #: Seconds a live reader keeps retrying an unreachable backend before it raises.
    retry_timeout: float = 30.0

    # -- writing ---------------------------------------------------------------------------

    async def create_writer(
        self,
        stream_id: str,
        agent_id: str,
        agent_type: str | None = None,
        *,
        buffered: bool = False,
        flush_size: int = 16,
        flush_interval: float = 0.005,
        epoch: int | None = None,
    ) -> StreamWriter:
        """A writer for ``stream_id``; the stream is created (``active``) if it does not exist.

        With ``buffered=True`` writes return at once and are stored in batches: every
        ``flush_size`` chunks, ``flush_interval`` seconds after the first unflushed chunk, on
        ``flush()`` and on ``close()``. With an ``epoch`` the writer is fenced: see :meth:`fence`.
        """
        validate_stream_id(stream_id)
        await self._ensure_stream(stream_id)
        if buffered:
            from streams.backends.buffered import BufferedStreamWriter

            return BufferedStreamWriter(
                self,
                stream_id,
                agent_id,
                agent_type,
                flush_size=flush_size,
                flush_interval=flush_interval,
                epoch=epoch,
            )
        return StreamWriter(self, stream_id, agent_id, agent_type, epoch=epoch)

    @abc.abstractmethod
    async def fence(self, stream_id: str, epoch: int) -> int:
        """Raise the stream's fencing epoch to ``epoch`` and return its latest sequence.

        From then on every write, step mark and status change that carries an older epoch is
        rejected with :class:`StreamSupersededError`, atomically (the check and the write are
        one operation in the store). A fenced write with a newer epoch raises the stream's epoch
        itself. Raises :class:`StreamSupersededError` if the stream already has a newer epoch,
        :class:`StreamNotFoundError` if it does not exist. Epochs only grow, across runs too.
        """

    # -- reading ---------------------------------------------------------------------------

    async def create_resumable_reader(
        self, stream_id: str, from_sequence: int = 0, *, stop_on_pause: bool = True
    ) -> ResumableStreamReader | None:
        """A reader yielding ``(chunk, sequence)`` for every chunk after ``from_sequence``.

        It tails live chunks until the stream ends or fails (and, with ``stop_on_pause``, until
        it pauses at a human-in-the-loop boundary). ``None`` for a missing or failed stream.
        """
        if not isinstance(from_sequence, int) or isinstance(from_sequence, bool) or from_sequence < 0:
            raise ValidationError(f"from_sequence must be a non-negative integer, not {from_sequence!r}")
        validate_stream_id(stream_id)
        page = await self._read_page(stream_id, from_sequence, self.page_size)
        if page is None or page.status == "failed":
            return None
        return ResumableStreamReader(self, stream_id, from_sequence, page, stop_on_pause=stop_on_pause)

    async def create_reader(self, stream_id: str) -> StreamReader | None:
        """A reader yielding every chunk of the stream from its start, then live ones until it ends."""
        reader = await self.create_resumable_reader(stream_id, 0)
        return None if reader is None else StreamReader(reader)

    async def get_all_chunks(self, stream_id: str) -> list[StoredChunk]:
        """Every stored chunk of the stream with its sequence (``[]`` for an unknown stream)."""
        return await self.get_chunks_from_sequence(stream_id, 0)

    async def get_chunks_from_sequence(
        self, stream_id: str, after_sequence: int, up_to: int | None = None
    ) -> list[StoredChunk]:
        """Stored chunks with a sequence greater than ``after_sequence`` (and at most ``up_to``)."""
        result: list[StoredChunk] = []
        cursor = after_sequence
        while up_to is None or cursor < up_to:
            limit = self.bulk_page_size if up_to is None else min(self.bulk_page_size, up_to - cursor)
            page = await self._read_page(stream_id, cursor, limit)
            if page is None:
                return result
            result.extend(page.chunks)
            if len(page.chunks) < limit:
                break
            cursor = page.chunks[-1][1]
        if up_to is not None and result and result[-1][1] > up_to:
            result = [item for item in result if item[1] <= up_to]
        return result

    async def get_chunks_from_step(self, stream_id: str, step: int, *, min_sequence: int = 0) -> list[StoredChunk]:
        """Stored chunks from the start of ``step`` on, as marked by ``writer.begin_step``.

        Step numbers restart with every run of a session: pass the run's start sequence as
        ``min_sequence`` so a mark left by an earlier run is ignored. ``[]`` if the step has not
        begun (after ``min_sequence``).
        """
        start = await self._step_start(stream_id, step)
        if start is None or start <= min_sequence:
            return []
        return await self.get_chunks_from_sequence(stream_id, start - 1)

    # -- lifecycle -------------------------------------------------------------------------

    @abc.abstractmethod
    async def get_stream_info(self, stream_id: str) -> StreamInfo | None:
        """Status, size and error of the stream; ``None`` if it does not exist."""

    @abc.abstractmethod
    async def end_stream(self, stream_id: str, output: Any = None, *, epoch: int | None = None) -> None:
        """Mark the stream ended (optionally with a final ``output``); readers finish. Like every
        status change, fenced when given an ``epoch`` (see :meth:`fence`)."""

    @abc.abstractmethod
    async def fail_stream(self, stream_id: str, error: str, *, epoch: int | None = None) -> None:
        """Mark the stream failed with ``error``; readers finish."""

    @abc.abstractmethod
    async def pause_stream(self, stream_id: str, *, epoch: int | None = None) -> None:
        """Mark an active stream paused (a run waits on a human)."""

    @abc.abstractmethod
    async def resume_stream(self, stream_id: str, *, epoch: int | None = None) -> None:
        """Mark a paused stream active again."""

    @abc.abstractmethod
    async def reopen_stream(self, stream_id: str) -> None:
        """Make an ended, failed or paused stream active again (the next run of its session).

        Sequences continue where they stopped; the error and output are cleared.
        """

    @abc.abstractmethod
    async def delete_stream(self, stream_id: str) -> bool:
        """Remove the stream and everything stored for it; ``False`` if it did not exist."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections and background tasks held by this manager."""

    # -- backend hooks ---------------------------------------------------------------------

    @abc.abstractmethod
    async def _ensure_stream(self, stream_id: str) -> None:
        """Create the stream as ``active`` if it does not exist."""

    @abc.abstractmethod
    async def _append(self, stream_id: str, batch: WriteBatch, epoch: int | None = None) -> int:
        """Store ``batch`` atomically; return the stream's latest sequence after it. With an
        ``epoch``, store nothing and raise :class:`StreamSupersededError` if the stream's is newer."""

    @abc.abstractmethod
    async def _read_page(self, stream_id: str, after_sequence: int, limit: int) -> ReadPage | None:
        """Up to ``limit`` chunks after ``after_sequence`` and the stream's state, read together.

        ``None`` if the stream does not exist. Chunks trimmed by ``max_length`` are skipped: the
        first one returned may then follow ``after_sequence`` with a gap.
        """

    @abc.abstractmethod
    async def _step_start(self, stream_id: str, step: int) -> int | None:
        """The sequence of the first chunk of the latest mark of ``step``."""

    @abc.abstractmethod
    def _subscribe(self, reader: ResumableStreamReader) -> Subscription:
        """Register ``reader`` for change notifications of its stream."""


class Subscription(abc.ABC):
    """A reader's registration for "something changed on my stream" notifications."""

    @abc.abstractmethod
    async def ready(self) -> None:
        """Return once notifications are flowing (so a read after this misses nothing)."""

    @abc.abstractmethod
    async def wait(self) -> list[StoredChunk] | None:
        """Block until the stream changes.

        Returns chunks pushed with the notification when the backend has them (the reader checks
        they follow on from what it delivered), or ``None``: read the store again.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Stop notifications."""


class StreamWriter:
    """Writes chunks of one agent to one stream; each ``write`` returns once the chunk is stored."""

    def __init__(
        self,
        manager: StreamManager,
        stream_id: str,
        agent_id: str,
        agent_type: str | None,
        *,
        epoch: int | None = None,
    ) -> None:
        self.manager = manager
        self.stream_id = stream_id
        self.agent_id = agent_id
        self.agent_type = agent_type
        self.epoch = epoch
        self.last_sequence: int | None = None
        self._closed = False
        self._writer_token = uuid.uuid4().hex[:12]
        self._batches = 0

    async def _store(self, batch: WriteBatch) -> int:
        """Append ``batch`` under this writer's epoch, with a token that makes retries safe."""
        if batch.token is None:
            self._batches += 1
            batch.token = f"{self._writer_token}:{self._batches}"
        return await self.manager._append(self.stream_id, batch, self.epoch)

    def prepare(self, chunk: Chunk | Mapping[str, Any]) -> tuple[Chunk, bytes]:
        """Validate ``chunk``; a dict gets this writer's ``agentId``/``agentType`` and the current
        ``timestamp`` where it leaves them out."""
        if isinstance(chunk, Mapping):
            data = dict(chunk)
            data.setdefault("agentId", self.agent_id)
            if self.agent_type is not None:
                data.setdefault("agentType", self.agent_type)
            data.setdefault("timestamp", now_ms())
            return encode_chunk(data)
        return encode_chunk(chunk)

    def _check_open(self) -> None:
        if self._closed:
            raise WriterClosedError(self.stream_id)

    async def write(self, chunk: Chunk | Mapping[str, Any]) -> int | None:
        """Store one chunk and return its sequence.

        Raises ``ChunkValidationError`` (nothing stored) for a malformed chunk and
        ``StreamClosedError`` if the stream has ended or failed.
        """
        return await self.write_many((chunk,))

    async def write_many(self, chunks: Iterable[Chunk | Mapping[str, Any]]) -> int | None:
        """Store several chunks atomically (all or none); return the last one's sequence."""
        self._check_open()
        batch = WriteBatch()
        for chunk in chunks:
            typed, payload = self.prepare(chunk)
            batch.chunks.append(typed)
            batch.payloads.append(payload)
        if not batch.chunks:
            return self.last_sequence
        self.last_sequence = await self._store(batch)
        return self.last_sequence

    async def begin_step(self, step: int) -> None:
        """Record that step ``step`` begins with the next chunk written to the stream."""
        self._check_open()
        await self._store(WriteBatch(steps=[(step, 0)]))

    async def flush(self) -> int | None:
        """Wait until every chunk written so far is stored; return the last sequence."""
        return self.last_sequence

    async def close(self) -> None:
        """Flush and refuse further writes. Closing does not end the stream."""
        self._closed = True

    async def __aenter__(self) -> StreamWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class ResumableStreamReader(AsyncIterator[StoredChunk]):
    """Yields ``(chunk, sequence)`` after a position, then live chunks until the stream stops.

    ``status`` is the stream's status as last seen, ``current_sequence`` the sequence of the
    last chunk yielded (the position to resume from), ``total_chunks`` the stream's latest
    sequence as last seen, ``error`` the failure message of a failed stream. Chunks are fetched
    in pages and handed on without an ``await`` per chunk; :meth:`batches` yields whole pages.
    """

    def __init__(
        self,
        manager: StreamManager,
        stream_id: str,
        from_sequence: int,
        first_page: ReadPage,
        *,
        stop_on_pause: bool = True,
    ) -> None:
        self.manager = manager
        self.stream_id = stream_id
        self.stop_on_pause = stop_on_pause
        self.current_sequence = from_sequence
        self.status: StreamStatus = first_page.status
        self.total_chunks = first_page.latest_sequence
        self.error: str | None = first_page.error
        self._cursor = from_sequence  # highest sequence handed to the buffer
        self._buffer: deque[StoredChunk] = deque()
        self._finished = False
        self._subscription: Subscription | None = None
        self._need_read = True
        self._take_page(first_page)

    def __aiter__(self) -> ResumableStreamReader:
        return self

    async def __anext__(self) -> StoredChunk:
        while not self._buffer:
            if self._finished:
                raise StopAsyncIteration
            await self._fill()
        item = self._buffer.popleft()
        self.current_sequence = item[1]
        return item

    async def batches(self) -> AsyncIterator[list[StoredChunk]]:
        """Yield the chunks in lists as they arrive (pages when catching up, live batches after).

        Leaving the loop early (a client that disconnected) closes the reader.
        """
        try:
            while True:
                if self._buffer:
                    batch = list(self._buffer)
                    self._buffer.clear()
                    self.current_sequence = batch[-1][1]
                    yield batch
                    continue
                if self._finished:
                    return
                await self._fill()
        finally:
            self._release()

    def _accept(self, chunks: list[StoredChunk]) -> bool:
        """Buffer the part of ``chunks`` that follows the cursor; False if there is a gap."""
        if not chunks:
            return True
        first = chunks[0][1]
        if first > self._cursor + 1:
            return False
        if chunks[-1][1] <= self._cursor:
            return True
        self._buffer.extend(chunks[self._cursor + 1 - first :])
        self._cursor = chunks[-1][1]
        if self._cursor > self.total_chunks:
            self.total_chunks = self._cursor
        return True

    def _should_stop(self) -> bool:
        return self.status in TERMINAL or (self.stop_on_pause and self.status == "paused")

    def _take_page(self, page: ReadPage) -> None:
        self.status, self.error = page.status, page.error
        self.total_chunks = max(self.total_chunks, page.latest_sequence)
        if not self._accept(page.chunks):
            raise SequenceExpiredError(self.stream_id, self._cursor, page.chunks[0][1])
        if not self._buffer and page.latest_sequence <= self._cursor and self._should_stop():
            self._finished = True

    async def _fill(self) -> None:
        """Put the next chunks into the buffer, or mark the reader finished.

        The store is read while catching up and whenever a notification cannot be trusted (a
        gap, a status change, a reconnect); a caught-up, subscribed reader just takes the chunks
        its notifications carry.
        """
        while True:
            if self._need_read:
                page = await self._read()
                if page is None:
                    await self.aclose()
                    raise StreamNotFoundError(self.stream_id, f"Stream {self.stream_id} was deleted while being read")
                self._take_page(page)
                # Read again unless caught up and subscribed, or to see a final status once more.
                self._need_read = (
                    self._subscription is None or self._cursor < page.latest_sequence or self._should_stop()
                )
                if self._buffer:
                    return
                if self._finished:
                    await self.aclose()
                    return
                if self._subscription is None:
                    # Caught up with a live stream: subscribe, then read once more so that nothing
                    # written before the subscription was live can be missed.
                    self._subscription = self.manager._subscribe(self)
                    await self._subscription.ready()
                    self._need_read = True
                continue
            assert self._subscription is not None
            pushed = await self._subscription.wait()
            if pushed is None or not self._accept(pushed):
                self._need_read = True
            elif self._buffer:
                return

    async def _read(self) -> ReadPage | None:
        """Read the next page, retrying an unreachable backend with backoff for a while."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.manager.retry_timeout
        delay = 0.05
        while True:
            try:
                return await self.manager._read_page(self.stream_id, self._cursor, self.manager.page_size)
            except StreamUnavailableError:
                if loop.time() + delay > deadline:
                    await self.aclose()
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _release(self) -> None:
        self._finished = True
        if self._subscription is not None:
            self._subscription.close()
            self._subscription = None

    async def aclose(self) -> None:
        """Stop reading; the stream and its producer are not affected."""
        self._release()

    async def __aenter__(self) -> ResumableStreamReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class StreamReader(AsyncIterator[Chunk]):
    """Yields the chunks of a stream (without sequences) until it stops."""

    def __init__(self, reader: ResumableStreamReader) -> None:
        self.resumable = reader

    @property
    def status(self) -> StreamStatus:
        return self.resumable.status

    @property
    def error(self) -> str | None:
        return self.resumable.error

    def __aiter__(self) -> StreamReader:
        return self

    async def __anext__(self) -> Chunk:
        return (await self.resumable.__anext__())[0]

    async def aclose(self) -> None:
        await self.resumable.aclose()
