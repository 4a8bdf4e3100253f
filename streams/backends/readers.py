"""The resumable reader: how a client follows a stream from a position to its end.

A reader yields ``(chunk, sequence)`` after a position: it reads the store in pages while it
catches up, then subscribes for change notifications and tails live chunks until the stream
ends, fails or (optionally) pauses. It reads through the store hooks of :class:`PageStore` and
waits on a backend's :class:`Subscription`; an unreachable backend is retried with backoff for
the store's ``retry_timeout``. Readers are made by ``StreamManager.create_resumable_reader``.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Iterator
from typing import Protocol

from streams.backends.records import TERMINAL, ReadPage, StreamStatus
from streams.backoff import Backoff, retry
from streams.exceptions import SequenceExpiredError, StreamNotFoundError, StreamUnavailableError
from streams.protocol import Chunk, StoredChunk

__all__ = ["PageStore", "ResumableStreamReader", "StreamReader", "Subscription"]


logger = logging.getLogger(__name__)

#: How long a caught-up reader trusts silence: after this long without a notification it reads the
#: store again, so a stream that ended, failed or vanished closes even if every notification is lost.
RECHECK_SECONDS = 1.0
_CHECK_BATCH = 64  # idle readers checked in one round trip
#: While a reader catches up, its pages grow from the store's ``page_size`` to about this many
#: bytes of stored chunks (at most :data:`MAX_PAGE_CHUNKS`): few round trips for a long replay,
#: and a bounded hold for a client that stops reading: the page being sent and the next one,
#: read meanwhile. The first page stays small, for a quick first event.
PAGE_BYTES = 64 * 1024
MAX_PAGE_CHUNKS = 2048


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

    @abc.abstractmethod
    def nudge(self) -> None:
        """Wake a pending :meth:`wait` with ``None`` (read the store again)."""


class _Watchdog:
    """Checks, for the caught-up readers of one event loop, those that heard nothing for
    :data:`RECHECK_SECONDS`: one batched read of their streams' status and latest sequence per
    store and tick, and a nudge only for a reader whose stream moved on without telling it.

    It also keeps idle streams alive: a reader whose :meth:`~ResumableStreamReader.batches` asked
    for a keep-alive and has yielded nothing for that long is nudged to yield an empty batch. One
    timer per loop, instead of a timeout around every batch of every stream."""

    def __init__(self) -> None:
        self.readers: weakref.WeakSet[ResumableStreamReader] = weakref.WeakSet()
        self._task: asyncio.Task[None] | None = None
        self._unverified: list[ResumableStreamReader] = []  # subscribed, not yet checked
        self._verifier: asyncio.Task[None] | None = None

    def watch(self, reader: ResumableStreamReader) -> None:
        self.readers.add(reader)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    def verify(self, reader: ResumableStreamReader) -> None:
        """Check once that ``reader``'s stream did not move on between its last read and its
        subscription going live, and nudge it to read again if it did. One task checks them, 64
        to a round trip: the readers subscribed in one turn of the loop, or while the check before
        was out, go together, and a reconnect storm's worth of them takes one round trip at a time
        instead of a task each, all waiting for the store's few connections at once."""
        self._unverified.append(reader)
        if self._verifier is None or self._verifier.done():
            self._verifier = asyncio.ensure_future(self._verify())

    async def _verify(self) -> None:
        while self._unverified:
            await asyncio.sleep(0)  # the readers subscribed in this turn of the loop go together
            readers, self._unverified = self._unverified, []
            for batch in _by_store(readers):
                await self._check(batch, time.monotonic(), strict=True)

    async def _run(self) -> None:
        while self.readers:
            await asyncio.sleep(RECHECK_SECONDS)
            now = time.monotonic()
            idle: list[ResumableStreamReader] = []
            for reader in list(self.readers):
                subscription = reader._subscription
                if subscription is None:
                    continue
                if reader._keep_alive is not None and now - reader._yielded_at >= reader._keep_alive:
                    reader._keep_alive_due = True
                    subscription.nudge()
                if now - reader._heard_at >= RECHECK_SECONDS:
                    idle.append(reader)
            for batch in _by_store(idle):  # small slices: live readers go first
                await self._check(batch, now)
                await asyncio.sleep(0)

    @staticmethod
    async def _check(readers: list[ResumableStreamReader], now: float, *, strict: bool = False) -> None:
        """Nudge the readers whose streams moved on without telling them. ``strict``: when the
        store cannot say, nudge them all (their own reads will find out), instead of waiting for
        the next tick."""
        # Only the readers still open: after a storm whose clients left, a backlog of checks of
        # closed readers would hold the store's connections (and the readers) for seconds.
        readers = [reader for reader in readers if reader._subscription is not None]
        if not readers:
            return
        try:
            positions = await readers[0].manager._positions(sorted({reader.stream_id for reader in readers}))
        except Exception:  # the store is away: the readers' own reads will say so
            logger.debug("could not check %d readers", len(readers), exc_info=True)
            if strict:
                for reader in readers:
                    if reader._subscription is not None:
                        reader._subscription.nudge()
            return
        for reader in readers:
            position = positions.get(reader.stream_id)
            subscription = reader._subscription
            if subscription is None:
                continue
            if position is None or position[0] != reader.status or position[1] > reader._cursor:
                reader._heard_at = now
                subscription.nudge()


def _by_store(readers: list[ResumableStreamReader]) -> Iterator[list[ResumableStreamReader]]:
    """``readers`` by store, in slices of at most :data:`_CHECK_BATCH`: one position read each."""
    stores: dict[int, list[ResumableStreamReader]] = {}
    for reader in readers:
        stores.setdefault(id(reader.manager), []).append(reader)
    for batch in stores.values():
        for start in range(0, len(batch), _CHECK_BATCH):
            yield batch[start : start + _CHECK_BATCH]


_watchdogs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watchdog] = weakref.WeakKeyDictionary()


def _watchdog() -> _Watchdog:
    loop = asyncio.get_running_loop()
    watchdog = _watchdogs.get(loop)
    if watchdog is None:
        watchdog = _watchdogs[loop] = _Watchdog()
    return watchdog


class PageStore(Protocol):
    """What a reader needs of the store (``StreamManager``'s page read and subscription hooks)."""

    page_size: int
    retry_timeout: float

    async def _read_page(self, stream_id: str, after_sequence: int, limit: int) -> ReadPage | None: ...

    def _subscribe(self, stream_id: str) -> Subscription: ...

    async def _positions(self, stream_ids: list[str]) -> dict[str, tuple[str, int] | None]: ...


class ResumableStreamReader(AsyncIterator[StoredChunk]):
    """Yields ``(chunk, sequence)`` after a position, then live chunks until the stream stops.

    ``status`` is the stream's status as last seen, ``current_sequence`` the sequence of the
    last chunk yielded (the position to resume from), ``total_chunks`` the stream's latest
    sequence as last seen, ``error`` the failure message of a failed stream. Chunks are fetched
    in pages and handed on without an ``await`` per chunk; :meth:`batches` yields whole pages.
    """

    def __init__(
        self,
        manager: PageStore,
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
        self._limit = manager.page_size  # chunks asked for per page (grows while catching up)
        self._buffer: deque[StoredChunk] = deque()
        self._finished = False
        self._subscription: Subscription | None = None
        self._watchdog: _Watchdog | None = None  # the one watching it, once subscribed
        self._heard_at = 0.0  # when its subscription last woke it (the watchdog nudges the silent)
        self._keep_alive: float | None = None  # seconds idle before batches() yields []
        self._keep_alive_due = False
        self._yielded_at = time.monotonic()  # when batches() last yielded
        # The page after the one being read, asked for ahead: the sequence it starts after, the
        # chunks asked for, its read.
        self._ahead: tuple[int, int, asyncio.Future[ReadPage | None]] | None = None
        self._reads = 0  # pages read after the first
        self._take_page(first_page, self._limit)
        # Read again only for more than the first page held, or to see a final status once more;
        # a reader the first page caught up subscribes straight away (and then reads once more).
        self._need_read = self._cursor < first_page.latest_sequence or self._should_stop()

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

    async def batches(self, *, keep_alive: float | None = None) -> AsyncGenerator[list[StoredChunk], None]:
        """Yield the chunks in lists as they arrive (pages when catching up, live batches after).

        With ``keep_alive``, an empty list after that many seconds (about: the reader watchdog
        checks once a second) in which the stream sent nothing, for the caller to keep its
        connection alive. Leaving the loop early (a client that disconnected) closes the reader.
        """
        self._keep_alive = keep_alive
        try:
            while True:
                if self._buffer:
                    batch = list(self._buffer)
                    self._buffer.clear()
                    self.current_sequence = batch[-1][1]
                    self._keep_alive_due = False
                    self._yielded_at = time.monotonic()
                    yield batch
                    continue
                if self._finished:
                    return
                if self._keep_alive_due:
                    self._keep_alive_due = False
                    self._yielded_at = time.monotonic()
                    yield []
                    continue
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

    def _take_page(self, page: ReadPage, asked: int) -> None:
        """Take ``page``, read with ``asked`` chunks as its limit."""
        if page.nbytes and len(page.chunks) >= asked:  # a full page: there is more to catch up
            per_chunk = page.nbytes / len(page.chunks)
            self._limit = max(self.manager.page_size, min(MAX_PAGE_CHUNKS, int(PAGE_BYTES / per_chunk)))
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
                read, asked = self._next_read()
                page = await self._read(read)
                if page is None:
                    await self.aclose()
                    raise StreamNotFoundError(self.stream_id, f"Stream {self.stream_id} was deleted while being read")
                self._take_page(page, asked)
                # Read again while behind, or to see a final status once more.
                self._need_read = self._cursor < page.latest_sequence or self._should_stop()
                if self._buffer:
                    return
                if self._finished:
                    await self.aclose()
                    return
                continue
            if self._subscription is None:
                self._drop_ahead()  # caught up: a page asked for ahead has nothing new
                # Caught up with a live stream: subscribe, then check (with the other readers
                # subscribing now) that nothing was written before the subscription was live; a
                # stream that moved on meanwhile nudges this reader to read it again.
                self._subscription = self.manager._subscribe(self.stream_id)
                await self._subscription.ready()
                self._heard_at = time.monotonic()
                self._watchdog = _watchdog()
                self._watchdog.watch(self)
                self._watchdog.verify(self)
                continue
            if self._keep_alive_due:
                return  # batches() yields its keep-alive; the next fill goes on from here
            pushed = await self._subscription.wait()
            self._heard_at = time.monotonic()
            if pushed is None or not self._accept(pushed):
                self._need_read = True
            elif self._buffer:
                return

    def _next_read(self) -> tuple[Awaitable[ReadPage | None], int]:
        """The read of the page after the cursor, and the chunks it asks for: the read asked for
        ahead if it starts there, else a new one. From the second such page on, while the reader
        is behind by more than the page holds, the page after it is asked for now too, so that
        the store reads it while this one is framed and sent (the caller's work on a page does not
        yield to the loop, so a read asked for once a page has arrived would go out only after
        that page is sent). Not for the first: a reconnect that reads a page or two and leaves
        costs the store no page more."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] != self._cursor:
            _drop(ahead[2])
            ahead = None
        current: Awaitable[ReadPage | None]
        if ahead is not None:
            current, asked = ahead[2], ahead[1]
        else:
            current, asked = self._fetch(self._cursor, self._limit), self._limit
        self._reads += 1
        following = self._cursor + asked  # where this page ends if it is full (sequences are dense)
        if following < self.total_chunks and self._reads > 1:
            read = asyncio.ensure_future(self._fetch(following, self._limit))
            read.add_done_callback(_retrieved)  # a reader left without closing it may never take it
            self._ahead = (following, self._limit, read)
        return current, asked

    async def _read(self, page: Awaitable[ReadPage | None]) -> ReadPage | None:
        """``page``, read; an unreachable backend closes the reader and raises."""
        try:
            return await page
        except StreamUnavailableError:
            await self.aclose()
            raise

    async def _fetch(self, after: int, limit: int) -> ReadPage | None:
        """Read a page after ``after``, retrying an unreachable backend with backoff for a while."""
        store = self.manager
        return await retry(
            lambda: store._read_page(self.stream_id, after, limit),
            StreamUnavailableError,
            Backoff(timeout=store.retry_timeout),
        )

    def _drop_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            _drop(ahead[2])

    def _release(self) -> None:
        self._finished = True
        self._drop_ahead()
        if self._watchdog is not None:
            self._watchdog.readers.discard(self)
            self._watchdog = None
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


def _drop(read: asyncio.Future[ReadPage | None]) -> None:
    """Cancel a page read that no one will take."""
    _retrieved(read)
    read.cancel()


def _retrieved(read: asyncio.Future[ReadPage | None]) -> None:
    if read.done() and not read.cancelled():
        read.exception()  # retrieved: a failed read no one takes is no news


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
