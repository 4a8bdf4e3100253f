"""The SSE body of a ``useChat`` response: stored chunks → transformed events → framed bytes.

Framing is :func:`streams.sse.encode_event`'s, the one SSE framer; this module drives the
transformer over a reader's batches and ends the body the way AI SDK servers do. It also has the
pieces a site needs to answer with a UI message stream of its own: :func:`create_sse_headers`,
:func:`create_sse_stream`, and the header an AI SDK UI client announces itself with
(:data:`AI_SDK_UI_HEADER`, :func:`is_ai_sdk_request`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from typing import Any

import msgspec

from chat.ai_sdk.events import ErrorChunk, FinishReason, UIMessageChunk
from chat.ai_sdk.transformer import StreamTransformer
from streams.exceptions import HelixError
from streams.protocol import Chunk, TextDelta
from streams.sse import DONE, KEEP_ALIVE, UI_MESSAGE_STREAM_HEADERS, encode_event

__all__ = [
    "AI_SDK_UI_HEADER",
    "AI_SDK_UI_HEADER_VALUE",
    "create_sse_headers",
    "create_sse_stream",
    "ending_cleanly",
    "is_ai_sdk_request",
    "ui_message_stream",
]

_json = msgspec.json.Encoder().encode

AI_SDK_UI_HEADER = "X-AI-SDK-UI"
"""The request header by which an AI SDK UI client may announce itself..."""
AI_SDK_UI_HEADER_VALUE = "vercel-ai-sdk-ui"
"""...with this value."""


def is_ai_sdk_request(headers: Mapping[str, Any]) -> bool:
    """Whether a request's headers (any mapping; names in any case) carry the AI SDK UI header."""
    wanted = AI_SDK_UI_HEADER.lower()
    return any(str(name).lower() == wanted and value == AI_SDK_UI_HEADER_VALUE for name, value in headers.items())


def create_sse_headers(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The headers of a UI message stream response, with ``extra`` added (or overriding)."""
    return {**UI_MESSAGE_STREAM_HEADERS, **(extra or {})}


async def create_sse_stream(
    events: AsyncIterable[UIMessageChunk | tuple[UIMessageChunk, int | None]],
) -> AsyncIterator[bytes]:
    """Frame UI message chunks (or ``(chunk, sequence)`` pairs, whose sequence becomes the
    ``id:`` line) as SSE, then ``data: [DONE]``."""
    async for item in events:
        if isinstance(item, tuple):
            yield encode_event(item[0], id=item[1])
        else:
            yield encode_event(item)
    yield DONE


async def ui_message_stream(
    chunks: AsyncIterable[tuple[Chunk, int] | Iterable[tuple[Chunk, int]]],
    transformer: StreamTransformer,
    *,
    head: Iterable[tuple[UIMessageChunk, int | None]] = (),
    finish_reason: FinishReason | None = None,
) -> AsyncIterator[bytes]:
    """SSE bytes for ``(chunk, sequence)`` pairs (or batches of them, as ``reader.batches()``
    yields): ``head`` events first (content replay), the transformed chunks with ``id:`` lines
    carrying their sequence, then ``finalize()``'s events and ``data: [DONE]``. An empty batch
    (``batches(keep_alive=…)`` on an idle stream) is sent as a keep-alive comment. The body ends when
    this generator does; closing it early closes ``chunks`` (and so the reader behind them)."""
    try:
        head_bytes = b"".join([encode_event(event, id=sequence) for event, sequence in head])
        if head_bytes:
            yield head_bytes
        async for item in chunks:
            if not item:  # an idle stream: its reader's keep-alive
                yield KEEP_ALIVE
                continue
            batch: Any = (item,) if _is_pair(item) else item
            parts = frame_batch(batch, transformer)
            if parts:
                yield parts
        yield b"".join([encode_event(event) for event in transformer.finalize(finish_reason)]) + DONE
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:  # a client that left: close the reader behind the chunks
            await aclose()


async def ending_cleanly(
    body: AsyncIterable[bytes], logger: logging.Logger, *, first: bytes = b""
) -> AsyncIterator[bytes]:
    """Pass an SSE body through, after ``first`` (say, a comment that makes the server send the
    headers at once); if reading it fails — the store, the database, a deleted session, a bug —
    end it with an ``error`` event (the chat's ``onError`` gets the code and the message) and
    ``data: [DONE]`` instead of letting the exception reach the server."""
    try:
        if first:
            yield first
        async for part in body:
            yield part
    except Exception as exc:
        if isinstance(exc, HelixError):
            logger.warning("a stream broke off: %s", exc)
            text = f"{exc.code}: {exc.message}"
        else:
            logger.exception("a stream broke off")
            text = "EXECUTION_ERROR: the stream broke off; reload to see the answer so far"
        yield encode_event(ErrorChunk(error_text=text)) + DONE
    finally:
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            await aclose()


def frame_batch(batch: Iterable[tuple[Chunk, int]], transformer: StreamTransformer) -> bytes:
    """The SSE events of a batch of ``(chunk, sequence)`` pairs, transformed by ``transformer``.

    Most chunks of an answer are text deltas on its open text block. Once the transformer says a
    delta only appends to that block (:meth:`~StreamTransformer.open_text_block`), the run of
    deltas of the same agent that follows it is framed directly, without building an event per
    delta: when no delta of the run needs a JSON escape (one encode of their joined text says so),
    as one string, each delta between quotes as it is. The bytes are encode_event's.

    Where the runs end is found in one pass over the batch, made when the first run starts: the
    text each pair would add to a run of its agent, ``""`` for a pair that ends one (another
    chunk type, another agent, an empty delta); a run then ends at the next ``""``."""
    pairs = batch if type(batch) is list else list(batch)
    parts: list[bytes] = []
    transform = transformer.transform
    texts: list[str] = []  # per pair, the text it would add to a run of ``agent``; then ""
    agent: str | None = None
    index, end = 0, len(pairs)
    while index < end:
        chunk, sequence = pairs[index]
        block = transformer.open_text_block(chunk) if type(chunk) is TextDelta else None
        if block is None:
            parts += [encode_event(event, id=sequence) for event in transform(chunk)[0]]
            index += 1
            continue
        if not texts or chunk.agent_id != agent:  # the batch's first run (its agent is the transformer's)
            agent = chunk.agent_id
            texts = [c.delta if type(c) is TextDelta and c.agent_id == agent else "" for c, _ in pairs]
            texts.append("")  # the batch's end ends a run too
        stop = texts.index("", index + 1)
        parts.append(_frame_deltas(pairs[index:stop], "".join(texts[index:stop]), _json(block).decode()))
        index = stop
    return b"".join(parts)


def _frame_deltas(run: list[tuple[Any, int]], text: str, block: str) -> bytes:
    """``text-delta`` events on ``block`` (its id as JSON) for a run of text deltas, whose
    deltas joined are ``text``."""
    head = '\ndata: {"type":"text-delta","id":' + block + ',"delta":'
    if len(_json(text)) == len(text.encode()) + 2:  # nothing to escape: each delta as it is
        return "".join([f'id: {sequence}{head}"{chunk.delta}"}}\n\n' for chunk, sequence in run]).encode()
    encoded_head = head.encode()
    return b"".join([b"id: %d%s%s}\n\n" % (sequence, encoded_head, _json(chunk.delta)) for chunk, sequence in run])


def _is_pair(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], int)
