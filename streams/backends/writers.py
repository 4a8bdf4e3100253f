"""The stream writer: how a producer puts chunks of one agent into one stream.

A writer validates chunks (filling in its agent and a timestamp), stores them through the one
store hook it needs (:class:`BatchStore`), fenced by its epoch and its holder, and tags every
batch with a token so that a backend may retry an append without storing it twice. Each
``write`` returns once the chunk is stored; :mod:`streams.backends.buffered` holds the batching
variant for high rates.
Writers are made by ``StreamManager.create_writer``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from streams.backends.records import WriteBatch
from streams.exceptions import WriterClosedError
from streams.protocol import Chunk, encode_chunk, now_ms

__all__ = ["BatchStore", "StreamWriter"]


class BatchStore(Protocol):
    """What a writer needs of the store: the atomic append of a batch (``StreamManager._append``)."""

    async def _append(
        self, stream_id: str, batch: WriteBatch, epoch: int | None = None, holder: str | None = None
    ) -> int: ...


class StreamWriter:
    """Writes chunks of one agent to one stream; each ``write`` returns once the chunk is stored."""

    def __init__(
        self,
        manager: BatchStore,
        stream_id: str,
        agent_id: str,
        agent_type: str | None,
        *,
        epoch: int | None = None,
        holder: str | None = None,
    ) -> None:
        self.manager = manager
        self.stream_id = stream_id
        self.agent_id = agent_id
        self.agent_type = agent_type
        self.epoch = epoch
        self.holder = holder
        self.last_sequence: int | None = None
        self._closed = False
        self._writer_token = uuid.uuid4().hex[:12]
        self._batches = 0

    async def _store(self, batch: WriteBatch) -> int:
        """Append ``batch`` under this writer's epoch and holder, with a token that makes retries safe."""
        if batch.token is None:
            self._batches += 1
            batch.token = f"{self._writer_token}:{self._batches}"
        return await self.manager._append(self.stream_id, batch, self.epoch, self.holder)

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
