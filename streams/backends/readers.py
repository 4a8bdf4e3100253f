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
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

from streams.backends.records import TERMINAL, ReadPage, StreamStatus
from streams.backoff import Backoff, retry
from streams.exceptions import SequenceExpiredError, StreamNotFoundError, StreamUnavailableError
from streams.protocol import Chunk, StoredChunk

__all__ = ["PageStore", "ResumableStreamReader", "StreamReader", "Subscription"]


#: How long a caught-up reader trusts silence: after this long without a notification it reads the
#: store again, so a stream that ended, failed or vanished closes even if every notification is lost.
RECHECK_SECONDS = 1.5


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


class PageStore(Protocol):
    """What a reader needs of the store (``StreamManager``'s page read and subscription hooks)."""

    page_size: int
    retry_timeout: float

    async def _read_page(self, stream_id: str, after_sequence: int, limit: int) -> ReadPage | None: ...

    def _subscribe(self, reader: ResumableStreamReader) -> Subscription: ...


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
            pushed = await self._notified(self._subscription)
            if pushed is None or not self._accept(pushed):
                self._need_read = True
            elif self._buffer:
                return

    @staticmethod
    async def _notified(subscription: Subscription) -> list[StoredChunk] | None:
        """The next notification, or ``None`` (read the store) when none came for
        :data:`RECHECK_SECONDS`: a lost notification delays a reader, it never strands it."""
        try:
            async with asyncio.timeout(RECHECK_SECONDS):
                return await subscription.wait()
        except TimeoutError:
            return None

    async def _read(self) -> ReadPage | None:
        """Read the next page, retrying an unreachable backend with backoff for a while."""
        store = self.manager
        try:
            return await retry(
                lambda: store._read_page(self.stream_id, self._cursor, store.page_size),
                StreamUnavailableError,
                Backoff(timeout=store.retry_timeout),
            )
        except StreamUnavailableError:
            await self.aclose()
            raise

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
