"""UI message stream events → SSE bytes, the body of a ``useChat`` response."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

import msgspec

from chat.ai_sdk.transformer import StreamTransformer, UIEvent
from streams.protocol import Chunk
from streams.sse import DONE

__all__ = ["encode_ui_event", "encode_ui_events", "ui_message_stream"]

_encode = msgspec.json.Encoder().encode


def encode_ui_event(event: UIEvent, sequence: int | None = None) -> bytes:
    """One event as SSE: ``id: <sequence>`` when it comes from a stored chunk, then ``data:``.

    JSON is compact UTF-8; NaN and infinities cannot appear (they are stored as ``null``), so the
    client's strict parser accepts every payload.
    """
    if sequence is None:
        return b"data: " + _encode(event) + b"\n\n"
    return b"id: %d\ndata: %s\n\n" % (sequence, _encode(event))


def encode_ui_events(events: Iterable[UIEvent], sequence: int | None = None) -> bytes:
    """Several events with the same (optional) sequence."""
    return b"".join([encode_ui_event(event, sequence) for event in events])


async def ui_message_stream(
    chunks: AsyncIterable[tuple[Chunk, int] | Iterable[tuple[Chunk, int]]],
    transformer: StreamTransformer,
    *,
    head: Iterable[tuple[UIEvent, int | None]] = (),
    finish_reason: str | None = None,
) -> AsyncIterator[bytes]:
    """SSE bytes for ``(chunk, sequence)`` pairs (or batches of them, as ``reader.batches()``
    yields): ``head`` events first (content replay), the transformed chunks with ``id:`` lines,
    then ``finalize()``'s events and ``data: [DONE]``. The body ends when this generator does;
    closing it early closes ``chunks`` (and so the reader behind them)."""
    try:
        head_bytes = b"".join([encode_ui_event(event, sequence) for event, sequence in head])
        if head_bytes:
            yield head_bytes
        async for item in chunks:
            batch: Any = (item,) if _is_pair(item) else item
            parts: list[bytes] = []
            for chunk, sequence in batch:
                events, _ = transformer.transform(chunk, sequence)
                for event in events:
                    parts.append(encode_ui_event(event, sequence))
            if parts:
                yield b"".join(parts)
        yield encode_ui_events(transformer.finalize(finish_reason)) + DONE
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:  # a client that left: close the reader behind the chunks
            await aclose()


def _is_pair(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], int)
