"""The wire events a stream is read as (``chunk``, ``end``, ``fail``). In a process, a reader's
iteration stops at the end of its stream, and its ``status`` and ``error`` say how it ended."""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from streams.protocol.chunks import Chunk


class _EventBase(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True, forbid_unknown_fields=True
):
    pass


class StreamChunkEvent(_EventBase, tag="chunk", frozen=True):
    """Wire event carrying one chunk and, when it was stored, its sequence."""

    chunk: Chunk
    sequence: int | None = None


class StreamEndEvent(_EventBase, tag="end", frozen=True):
    """Wire event: the stream ended."""


class StreamFailEvent(_EventBase, tag="fail", frozen=True):
    """Wire event: the stream failed with ``error``."""

    error: str


StreamEvent: TypeAlias = StreamChunkEvent | StreamEndEvent | StreamFailEvent
