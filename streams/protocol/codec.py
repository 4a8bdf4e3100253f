"""The chunk codec: strict validation into typed chunks, canonical JSON bytes, and batch decoding.

Decoding is strict: :func:`parse_chunk` raises :class:`~streams.exceptions.ChunkValidationError`
naming the bad field. Stored payloads were validated when written, so :func:`decode_chunks`
decodes a page in one pass and hands on an :class:`UnknownChunk` for a type it does not know.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import msgspec

from streams.exceptions import ChunkValidationError
from streams.protocol.chunks import CHUNK_CLASSES, Chunk
from streams.protocol.events import StreamEvent

_logger = logging.getLogger("streams.protocol")

_encoder = msgspec.json.Encoder()
_chunk_decoder = msgspec.json.Decoder(Chunk)
_chunk_list_decoder = msgspec.json.Decoder(list[Chunk])
_event_decoder = msgspec.json.Decoder(StreamEvent)

_FIELD_PATTERNS = (
    re.compile(r"missing required field `(?P<name>[^`]+)`(?: - at `\$(?P<path>[^`]*)`)?"),
    re.compile(r"unknown field `(?P<name>[^`]+)`(?: - at `\$(?P<path>[^`]*)`)?"),
    re.compile(r"at `\$(?P<path>[^`]*)`"),
)


def _field_of(message: str) -> str | None:
    """The dotted field path a msgspec validation message refers to."""
    for pattern in _FIELD_PATTERNS:
        match = pattern.search(message)
        if match:
            groups = match.groupdict()
            parts = [groups.get("path") or "", groups.get("name") or ""]
            path = ".".join(p.strip(".") for p in parts if p.strip("."))
            return path or None
    return None


def _validation_error(exc: Exception) -> ChunkValidationError:
    message = str(exc)
    if isinstance(exc, msgspec.DecodeError) and not isinstance(exc, msgspec.ValidationError):
        return ChunkValidationError(f"Chunk is not valid JSON: {message}")
    field = _field_of(message)
    if field == "type" and message.startswith("Invalid value"):
        return ChunkValidationError(f"Unknown chunk type {message.split()[2]}", field="type")
    return ChunkValidationError(f"Invalid chunk: {message}", field=field)


def parse_chunk(obj: Chunk | dict[str, Any] | str | bytes) -> Chunk:
    """Validate ``obj`` (a wire dict, JSON text or bytes, or a chunk) and return the typed chunk.

    Raises :class:`ChunkValidationError` naming the field on an unknown type, a missing field, an
    unknown field or a wrong type.
    """
    try:
        if isinstance(obj, (str, bytes, bytearray, memoryview)):
            chunk: Chunk = _chunk_decoder.decode(obj)
            return chunk
        if isinstance(obj, CHUNK_CLASSES):
            # Struct constructors do not check types: round-trip to validate.
            chunk = _chunk_decoder.decode(_encoder.encode(obj))
            return chunk
        if isinstance(obj, dict):
            chunk = msgspec.convert(obj, Chunk, strict=True)
            return chunk
    except (msgspec.ValidationError, msgspec.DecodeError, msgspec.EncodeError, TypeError) as exc:
        raise _validation_error(exc) from None
    raise ChunkValidationError(f"A chunk must be a dict, JSON text or a chunk, not {type(obj).__name__}")


def encode_chunk(obj: Chunk | dict[str, Any]) -> tuple[Chunk, bytes]:
    """Validate ``obj`` and return it typed together with its canonical JSON bytes.

    This is what stores call before keeping a chunk: nothing invalid can be stored.
    """
    try:
        payload = _encoder.encode(obj)
        return _chunk_decoder.decode(payload), payload
    except (msgspec.ValidationError, msgspec.DecodeError, msgspec.EncodeError, TypeError) as exc:
        raise _validation_error(exc) from None


class UnknownChunk(msgspec.Struct, frozen=True, kw_only=True):
    """A stored chunk this version cannot decode, such as a type added by a newer producer.

    Readers hand it on in its place (sequences stay aligned); consumers skip it.
    """

    type: str
    agent_id: str = ""
    raw: bytes = b""


def _unknown(payload: bytes) -> UnknownChunk:
    try:
        data = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        data = None
    if not isinstance(data, dict):
        return UnknownChunk(type="?", raw=payload)
    return UnknownChunk(type=str(data.get("type", "?")), agent_id=str(data.get("agentId", "")), raw=payload)


def decode_chunks(payloads: list[bytes]) -> list[Chunk]:
    """Decode many stored chunk payloads in one pass (they were validated when written).

    A payload this version cannot decode becomes an :class:`UnknownChunk` in its place, with a
    log line, instead of failing the whole page.
    """
    if not payloads:
        return []
    try:
        chunks: list[Chunk] = _chunk_list_decoder.decode(b"[" + b",".join(payloads) + b"]")
        return chunks
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    decoded: list[Any] = []
    for payload in payloads:
        try:
            decoded.append(_chunk_decoder.decode(payload))
        except (msgspec.ValidationError, msgspec.DecodeError):
            unknown = _unknown(payload)
            _logger.warning("skipping a stored chunk of unknown type %r", unknown.type)
            decoded.append(unknown)
    return decoded


def dump_chunk(chunk: Chunk) -> dict[str, Any]:
    """The wire dict of ``chunk`` (camelCase keys, ``type`` first, unset optional fields left out)."""
    result: dict[str, Any] = msgspec.to_builtins(chunk)
    return result


def parse_stream_event(obj: dict[str, Any] | str | bytes) -> StreamEvent:
    """Validate a wire event (``chunk``, ``end`` or ``fail``; a dict or JSON text) as strictly as
    :func:`parse_chunk` validates a chunk, and return it typed.

    Raises :class:`ChunkValidationError` naming the field (``chunk.delta``, ``sequence``, …).
    """
    try:
        if isinstance(obj, (str, bytes, bytearray, memoryview)):
            event: StreamEvent = _event_decoder.decode(obj)
            return event
        if isinstance(obj, dict):
            event = msgspec.convert(obj, StreamEvent, strict=True)
            return event
    except (msgspec.ValidationError, msgspec.DecodeError, TypeError) as exc:
        raise _validation_error(exc) from None
    raise ChunkValidationError(f"A wire event must be a dict or JSON text, not {type(obj).__name__}")
