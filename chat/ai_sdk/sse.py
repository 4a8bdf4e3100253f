"""The SSE body of a ``useChat`` response: stored chunks → transformed events → framed bytes.

Framing is :func:`streams.sse.encode_event`'s, the one SSE framer; this module only drives the
transformer over a reader's batches and ends the body the way AI SDK servers do.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

from chat.ai_sdk.events import FinishReason, UIMessageChunk
from chat.ai_sdk.transformer import StreamTransformer
from streams.protocol import Chunk
from streams.sse import DONE, encode_event

__all__ = ["ui_message_stream"]


async def ui_message_stream(
    chunks: AsyncIterable[tuple[Chunk, int] | Iterable[tuple[Chunk, int]]],
    transformer: StreamTransformer,
    *,
    head: Iterable[tuple[UIMessageChunk, int | None]] = (),
    finish_reason: FinishReason | None = None,
) -> AsyncIterator[bytes]:
    """SSE bytes for ``(chunk, sequence)`` pairs (or batches of them, as ``reader.batches()``
    yields): ``head`` events first (content replay), the transformed chunks with ``id:`` lines
    carrying their sequence, then ``finalize()``'s events and ``data: [DONE]``. The body ends when
    this generator does; closing it early closes ``chunks`` (and so the reader behind them)."""
    transform = transformer.transform
    try:
        head_bytes = b"".join([encode_event(event, id=sequence) for event, sequence in head])
        if head_bytes:
            yield head_bytes
        async for item in chunks:
            batch: Any = (item,) if _is_pair(item) else item
            parts: list[bytes] = []
            for chunk, sequence in batch:
                for event in transform(chunk)[0]:
                    parts.append(encode_event(event, id=sequence))
            if parts:
                yield b"".join(parts)
        yield b"".join([encode_event(event) for event in transformer.finalize(finish_reason)]) + DONE
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:  # a client that left: close the reader behind the chunks
            await aclose()


def _is_pair(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], int)
