"""Server-sent events primitives: framing, response headers, keep-alive and resume positions.

Framing follows the AI SDK UI message stream (``ai`` v6): one ``data:`` line of JSON per event,
an optional ``id:`` line carrying the stream sequence, and a blank line after every event, so the
last event is never dropped by the client's parser. JSON never contains ``NaN`` or ``Infinity``.
:func:`encode_event` is the only SSE framer of the project: ``chat.ai_sdk`` frames its events
with it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from typing import Any

import msgspec
from django.utils.datastructures import CaseInsensitiveMapping

from streams.backends.readers import ResumableStreamReader
from streams.exceptions import ResumePositionError
from streams.protocol import StreamChunkEvent, StreamEndEvent, StreamFailEvent

__all__ = [
    "DONE",
    "KEEP_ALIVE",
    "MAX_RESUME_POSITION",
    "RESUME_HEADERS",
    "UI_MESSAGE_STREAM_HEADERS",
    "encode_event",
    "extract_resume_position",
    "header_value",
    "wire_events",
    "with_keep_alive",
]

UI_MESSAGE_STREAM_HEADERS: dict[str, str] = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
"""Headers of a UI message stream response (``connection`` is dropped by ASGI servers as needed)."""

KEEP_ALIVE = b": keep-alive\n\n"
"""An SSE comment: keeps proxies from closing an idle stream; every client ignores it."""

DONE = b"data: [DONE]\n\n"
"""The terminator AI SDK servers send before closing the body."""

RESUME_HEADERS = ("Last-Event-ID", "X-Resume-From-Sequence", "X-Resume-At")
"""Headers read by :func:`extract_resume_position`, in order of precedence."""

MAX_RESUME_POSITION = 2**53 - 1
"""The largest accepted position (the largest integer a JavaScript client holds exactly)."""

_encode = msgspec.json.Encoder().encode


def _dumps(data: Any) -> bytes:
    if isinstance(data, (bytes, bytearray)):
        payload = bytes(data)
    elif isinstance(data, str):
        payload = data.encode()
    else:
        payload = json.dumps(data, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()
    if b"\n" in payload or b"\r" in payload:
        raise ValueError("SSE data must be a single line")
    return payload


def encode_event(data: Any, *, id: int | str | None = None, event: str | None = None) -> bytes:
    """One SSE event: an optional ``id:`` and ``event:`` line, ``data:`` and a blank line.

    This is the one SSE framer: Helix wire events and AI SDK UI message stream events alike. A
    ``msgspec.Struct`` (a typed event) is written as msgspec's compact UTF-8 JSON, always one line,
    with NaN and infinities as ``null``. Bytes and str are sent as they are; anything else is
    written as JSON, and raises ``ValueError`` when it holds NaN or infinities, which clients
    reject, or when bytes or str would span lines.
    """
    # The hot path (a typed event with a sequence) first; `hasattr` is a cheaper Struct test than
    # `isinstance`, which goes through StructMeta.
    payload = _encode(data) if hasattr(data, "__struct_fields__") else _dumps(data)
    if event is None:
        if type(id) is int:
            return b"id: %d\ndata: %s\n\n" % (id, payload)
        if id is None:
            return b"data: " + payload + b"\n\n"
    head = b"" if id is None else b"id: %s\n" % str(id).encode()
    if event is not None:
        head += b"event: %s\n" % event.encode()
    return head + b"data: " + payload + b"\n\n"


_UNPREFIXED = frozenset({"CONTENT_TYPE", "CONTENT_LENGTH"})
_meta_names: dict[str, str] = {}


def _meta_name(name: str) -> str:
    """The ``META`` key of header ``name``, as Django's request stores it (``HTTP_LAST_EVENT_ID``)."""
    key = _meta_names.get(name)
    if key is None:
        key = name.upper().replace("-", "_")
        key = _meta_names[name] = key if key in _UNPREFIXED else "HTTP_" + key
    return key


def _meta_of(source: Any) -> dict[str, Any] | None:
    """The ``META`` of a Django request (a DRF request passes its own on): a dict lookup per
    header, where ``request.headers`` builds a mapping of them all first and raises ``KeyError``
    inside for every header that is absent."""
    meta = getattr(source, "META", None)
    return meta if type(meta) is dict else None


def _headers_of(source: Any) -> Mapping[str, Any] | None:
    headers = getattr(source, "headers", None)  # Django HttpRequest, or anything with .headers
    if headers is not None:
        return headers  # type: ignore[no-any-return]
    if isinstance(source, Mapping):
        return source
    return None


def _lookup(headers: Mapping[str, Any], name: str) -> Any:
    value = headers.get(name)
    if value is not None or isinstance(headers, CaseInsensitiveMapping):  # a request's headers
        return value
    lowered = name.lower()
    for key, candidate in headers.items():
        if isinstance(key, str) and key.lower() in (lowered, "http_" + lowered.replace("-", "_")):
            return candidate
    return None


def _header_reader(source: Any) -> Callable[[str], Any] | None:
    """A lookup of ``source``'s headers by name (``None`` for a value with no headers): by
    ``META`` key for a Django request, else through its header mapping."""
    meta = _meta_of(source)
    if meta is not None:
        return lambda name: meta.get(_meta_name(name))
    headers = _headers_of(source)
    return None if headers is None else functools.partial(_lookup, headers)


def header_value(source: Any, name: str) -> Any:
    """Header ``name`` (any case) of ``source``: a request with ``.headers``, a mapping of header
    names, or a WSGI/ASGI-style ``META`` mapping (``HTTP_…`` keys); ``None`` when absent."""
    read = _header_reader(source)
    return None if read is None else read(name)


def _parse_position(value: Any, header: str | None) -> int:
    label = header or "resume position"
    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    text = text.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 16:
        if text.startswith("-") and text[1:].isdigit():
            raise ResumePositionError(f"{label} must not be negative, got {text!r}", header)
        raise ResumePositionError(f"{label} must be a non-negative integer, got {text[:40]!r}", header)
    position = int(text)
    if position > MAX_RESUME_POSITION:
        raise ResumePositionError(f"{label} is too large: {text}", header)
    return position


def extract_resume_position(source: Any) -> int | None:
    """The sequence a client wants to resume after, or ``None`` if it named none.

    ``source`` is a header mapping (case-insensitive names, WSGI ``HTTP_*`` keys accepted), a
    Django request, or a raw value such as ``"42"``. Headers are read in the order of
    :data:`RESUME_HEADERS`. Raises :class:`ResumePositionError` for a negative, non-numeric or
    oversized value.
    """
    if source is None:
        return None
    read = _header_reader(source)
    if read is None:
        if isinstance(source, bool) or not isinstance(source, (str, bytes, int)):
            raise ResumePositionError(f"Unsupported resume position source {type(source).__name__}")
        if isinstance(source, (str, bytes)) and not source.strip():
            return None
        return _parse_position(source, None)
    for name in RESUME_HEADERS:
        value = read(name)
        if value is not None and str(value).strip():
            return _parse_position(value, name)
    return None


async def with_keep_alive(events: AsyncIterable[bytes], interval: float) -> AsyncIterator[bytes]:
    """Pass ``events`` through, inserting :data:`KEEP_ALIVE` after every ``interval`` seconds idle.

    Closing this generator (a client disconnect) cancels the pending read and closes ``events``.
    """
    iterator = aiter(events)
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait((pending,), timeout=interval)
            if not done:
                yield KEEP_ALIVE
                continue
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            finally:
                pending = None
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()


async def wire_events(reader: ResumableStreamReader, *, keep_alive: float | None = None) -> AsyncIterator[bytes]:
    """The Helix wire events of a reader as SSE: a ``chunk`` event per chunk (``id:`` = its
    sequence), then ``end`` or ``fail`` when the stream stops. A paused stream just closes. With
    ``keep_alive``, :data:`KEEP_ALIVE` after that many seconds idle."""
    try:
        async for batch in reader.batches(keep_alive=keep_alive):
            if not batch:
                yield KEEP_ALIVE
                continue
            yield b"".join(
                encode_event(StreamChunkEvent(chunk=chunk, sequence=sequence), id=sequence) for chunk, sequence in batch
            )
        if reader.status == "ended":
            yield encode_event(StreamEndEvent())
        elif reader.status == "failed":
            yield encode_event(StreamFailEvent(error=reader.error or "failed"))
    finally:
        await reader.aclose()
