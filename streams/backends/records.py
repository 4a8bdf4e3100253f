"""The values that pass between a stream store, its writers and its readers.

A stream's status and where it stands (:class:`StreamInfo`), a batch as a writer hands it to the
store (:class:`WriteBatch`), a page as the store hands it to a reader (:class:`ReadPage`), and
the rule for a usable stream id. Plain data, no behaviour: every other module of the store
imports it, and it imports none of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from streams.exceptions import ValidationError
from streams.protocol import Chunk, StoredChunk

__all__ = ["TERMINAL", "ReadPage", "StreamInfo", "StreamStatus", "WriteBatch", "validate_stream_id"]

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
    """Where a stream stands. ``total_chunks`` counts every chunk ever written to it; ``holder``
    is the producer it was last opened for (``StreamManager.open_stream``), if any."""

    stream_id: str
    status: StreamStatus
    total_chunks: int
    latest_sequence: int
    error: str | None = None
    output: Any = None
    created_at: int | None = None
    updated_at: int | None = None
    epoch: int = 0
    holder: str | None = None


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
    #: The stored size of ``chunks`` in bytes, when the backend knows it (0: it does not).
    nbytes: int = 0
