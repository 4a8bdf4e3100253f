"""The end-of-stream sentinel and the wire events a stream is read as (``chunk``, ``end``, ``fail``)."""

from __future__ import annotations

from typing import Literal, TypeAlias, TypeGuard

import msgspec

from streams.protocol.chunks import Chunk


class StreamEnd(msgspec.Struct, frozen=True, kw_only=True):
    """Marks the end of a stream in a sequence of chunks: ``status`` is ``ended`` or ``failed``."""

    status: Literal["ended", "failed"]
    error: str | None = None


def is_stream_end(obj: object) -> TypeGuard[StreamEnd]:
    """True for the end sentinel."""
    return isinstance(obj, StreamEnd)


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
