"""A writer for high-rate producers: writes return at once and are stored in batches."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from streams.backends.records import WriteBatch
from streams.backends.writers import BatchStore, StreamWriter
from streams.protocol import Chunk

__all__ = ["BufferedStreamWriter"]


class BufferedStreamWriter(StreamWriter):
    """Buffers chunks and stores them in atomic batches.

    A batch is sent when ``flush_size`` chunks are waiting, ``flush_interval`` seconds after the
    first waiting chunk, on :meth:`flush` and on :meth:`close`. While a batch is in flight new
    chunks keep buffering and go out together in the next one. ``write`` returns ``None``: the
    sequence is known once stored (``flush()`` returns the last one). When a batch cannot be
    stored, its chunks stay buffered and the error is raised by the next ``write``, ``flush`` or
    ``close``; a later flush retries that batch first, under the same token, so a batch whose
    reply was lost is not stored twice.
    """

    max_batch = 512
    max_pending = 8192

    def __init__(
        self,
        manager: BatchStore,
        stream_id: str,
        agent_id: str,
        agent_type: str | None,
        *,
        flush_size: int = 16,
        flush_interval: float = 0.005,
        epoch: int | None = None,
        holder: str | None = None,
    ) -> None:
        super().__init__(manager, stream_id, agent_id, agent_type, epoch=epoch, holder=holder)
        self.flush_size = max(1, flush_size)
        self.flush_interval = flush_interval
        self._batch = WriteBatch()
        self._failed: WriteBatch | None = None
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._error: BaseException | None = None

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    async def write_many(self, chunks: Iterable[Chunk | Mapping[str, Any]]) -> int | None:
        """Buffer chunks (validated now: a malformed one raises and nothing of the call is kept)."""
        self._check_open()
        self._raise_error()
        prepared = [self.prepare(chunk) for chunk in chunks]
        for typed, payload in prepared:
            self._batch.chunks.append(typed)
            self._batch.payloads.append(payload)
        pending = len(self._batch.chunks)
        if pending >= self.max_pending:
            await self.flush()
        elif pending >= self.flush_size:
            if self._task is None:
                self._start()
                await asyncio.sleep(0)  # let the flush put its batch on the wire
        elif self._timer is None and self._task is None:
            self._timer = asyncio.get_running_loop().call_later(self.flush_interval, self._start)
        return None

    async def begin_step(self, step: int) -> None:
        """Mark that step ``step`` begins with the next chunk written (kept in order with the buffer)."""
        self._check_open()
        self._batch.steps.append((step, len(self._batch.chunks)))
        if self._timer is None and self._task is None:
            self._timer = asyncio.get_running_loop().call_later(self.flush_interval, self._start)

    def _start(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def _take(self) -> WriteBatch:
        batch = self._batch
        if len(batch.chunks) <= self.max_batch:
            self._batch = WriteBatch()
            return batch
        cut = self.max_batch
        head = WriteBatch(batch.chunks[:cut], batch.payloads[:cut], [(s, i) for s, i in batch.steps if i < cut])
        self._batch = WriteBatch(
            batch.chunks[cut:], batch.payloads[cut:], [(s, i - cut) for s, i in batch.steps if i >= cut]
        )
        return head

    def _pending(self) -> bool:
        return self._failed is not None or bool(self._batch.chunks or self._batch.steps)

    async def _run(self) -> None:
        try:
            while self._pending():
                batch = self._failed or self._take()
                self._failed = None
                try:
                    self.last_sequence = await self._store(batch)
                except BaseException as exc:
                    self._failed = batch  # retried first and with its token: never stored twice
                    self._error = exc
                    return
        finally:
            self._task = None

    async def flush(self) -> int | None:
        """Store everything buffered; return the last stored sequence."""
        while True:
            if self._task is not None:
                await asyncio.shield(self._task)
            self._raise_error()
            if not self._pending():
                return self.last_sequence
            self._start()

    async def close(self) -> None:
        """Flush, then refuse further writes."""
        if self._closed:
            return
        try:
            await self.flush()
        finally:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
