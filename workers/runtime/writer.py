"""The writing side of a run: one agent's typed chunks into the session's stream.

Every chunk carries the same envelope: the emitting agent (``agent_id``, ``agent_type``) and a
millisecond ``timestamp``. :meth:`RunWriter.emit` fills it in once, from the stream writer it
wraps, so the runtime names only a chunk type from :mod:`streams.protocol` and that type's own
fields. The chunk is validated when the store encodes it: a wrong field raises
:class:`~streams.exceptions.ChunkValidationError` and nothing is stored.
"""

from __future__ import annotations

from typing import Any

from streams.backends.writers import StreamWriter
from streams.protocol import Chunk, now_ms

__all__ = ["RunWriter"]


class RunWriter:
    """Emits one agent's chunks through ``stream`` (a plain or a buffered stream writer)."""

    def __init__(self, stream: StreamWriter) -> None:
        self.stream = stream

    @property
    def agent_id(self) -> str:
        return self.stream.agent_id

    @property
    def agent_type(self) -> str | None:
        return self.stream.agent_type

    async def emit(self, chunk_type: type[Chunk], /, **fields: Any) -> None:
        """Write a ``chunk_type`` chunk of ``fields`` (snake_case), with this agent's envelope."""
        envelope: dict[str, Any] = {"agent_id": self.stream.agent_id, "timestamp": now_ms()}
        if self.stream.agent_type is not None:
            envelope["agent_type"] = self.stream.agent_type
        chunk = chunk_type(**envelope, **fields)
        await self.stream.write(chunk)

    async def begin_step(self, step: int) -> None:
        """Mark the next chunk as the first of ``step`` (a new attempt voids an unfinished step from it)."""
        await self.stream.begin_step(step)

    async def flush(self) -> int | None:
        """Wait until every chunk emitted so far is stored; return the last one's sequence."""
        return await self.stream.flush()

    async def close(self) -> None:
        """Flush and refuse further chunks (the stream itself stays open)."""
        await self.stream.close()
