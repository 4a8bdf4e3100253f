"""The Helix chunk protocol: typed chunks, their wire form, type guards and wire events.

Chunks mirror the stream protocol of the TypeScript Helix Agents core (``StreamChunk``), extended
with the run-lifecycle, checkpoint and recovery chunks Helix for Django needs. Every chunk is a
frozen ``msgspec.Struct``; on the wire it is one JSON object whose ``type`` field selects the
class, whose field names are camelCase, and which may carry no unknown field. Python attributes are
snake_case (``chunk.agent_id`` is ``"agentId"`` on the wire). ``docs/protocol.md`` documents every
type.

Decoding is strict: :func:`parse_chunk` raises :class:`~streams.exceptions.ChunkValidationError`
naming the bad field.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from typing import Any, Literal, NamedTuple, TypeAlias, TypeGuard

import msgspec

from streams.exceptions import ChunkValidationError

_logger = logging.getLogger("streams.protocol")

__all__ = [
    "CHUNK_TYPES",
    "CheckpointCreated",
    "Chunk",
    "CustomEvent",
    "ErrorChunk",
    "ExecutorSuperseded",
    "OutputChunk",
    "PatchOperation",
    "RunInterrupted",
    "RunPaused",
    "RunResumed",
    "StatePatch",
    "StepCommitted",
    "StepDiscarded",
    "StoredChunk",
    "StreamChunkEvent",
    "StreamEnd",
    "StreamEndEvent",
    "StreamEvent",
    "StreamFailEvent",
    "StreamResync",
    "SubAgentEnd",
    "SubAgentStart",
    "TextDelta",
    "Thinking",
    "ToolApprovalRequest",
    "ToolArgStreamDelta",
    "ToolArgStreamEnd",
    "ToolArgStreamStart",
    "ToolEnd",
    "ToolInputError",
    "ToolOutputDenied",
    "ToolOutputError",
    "ToolStart",
    "UnknownChunk",
    "decode_chunks",
    "dump_chunk",
    "encode_chunk",
    "is_chunk",
    "is_stream_end",
    "now_ms",
    "parse_chunk",
    "stored_chunks",
]


def now_ms() -> int:
    """The current time as a Unix timestamp in milliseconds, the unit of ``timestamp``."""
    return time.time_ns() // 1_000_000


class _ChunkBase(
    msgspec.Struct,
    kw_only=True,
    frozen=True,
    rename="camel",
    forbid_unknown_fields=True,
    omit_defaults=True,
    tag_field="type",
    gc=False,
):
    """Fields every chunk carries: the emitting agent and a millisecond timestamp."""

    agent_id: str
    agent_type: str | None = None
    timestamp: int


# -- content ----------------------------------------------------------------------------------


class TextDelta(_ChunkBase, tag="text_delta", kw_only=True, frozen=True):
    """A piece of the model's answer text."""

    delta: str


class Thinking(_ChunkBase, tag="thinking", kw_only=True, frozen=True):
    """A piece of the model's reasoning; ``is_complete`` marks the end of a reasoning block."""

    content: str
    is_complete: bool = False


class ToolStart(_ChunkBase, tag="tool_start", kw_only=True, frozen=True):
    """A tool call with its complete arguments is about to execute."""

    tool_call_id: str
    tool_name: str
    arguments: Any = None


class ToolEnd(_ChunkBase, tag="tool_end", kw_only=True, frozen=True):
    """A tool call finished; ``success`` is false and ``error`` set when it raised."""

    tool_call_id: str
    result: Any = None
    success: bool = True
    error: str | None = None


class ToolArgStreamStart(_ChunkBase, tag="tool_arg_stream_start", kw_only=True, frozen=True):
    """The model began streaming the arguments of a tool call."""

    tool_call_id: str
    tool_name: str


class ToolArgStreamDelta(_ChunkBase, tag="tool_arg_stream_delta", kw_only=True, frozen=True):
    """A fragment of a tool call's raw JSON argument text, in order."""

    tool_call_id: str
    delta: str


class ToolArgStreamEnd(_ChunkBase, tag="tool_arg_stream_end", kw_only=True, frozen=True):
    """The arguments of a tool call are complete; ``arguments`` holds them parsed."""

    tool_call_id: str
    tool_name: str
    arguments: Any = None


class ToolInputError(_ChunkBase, tag="tool_input_error", kw_only=True, frozen=True):
    """The model's arguments for a tool were unparseable or failed the tool's input schema.

    ``input`` is what the model sent (the raw text when it was not JSON); the tool did not run.
    """

    tool_call_id: str
    tool_name: str
    input: Any = None
    error: str


class ToolOutputError(_ChunkBase, tag="tool_output_error", kw_only=True, frozen=True):
    """A tool call produced no usable output (it raised, timed out, or its result was rejected)."""

    tool_call_id: str
    tool_name: str | None = None
    error: str


class ToolApprovalRequest(_ChunkBase, tag="tool_approval_request", kw_only=True, frozen=True):
    """Tool call ``tool_call_id`` waits for a person to approve it; ``approval_id`` names the
    server-side approval record the decision must answer."""

    tool_call_id: str
    approval_id: str


class ToolOutputDenied(_ChunkBase, tag="tool_output_denied", kw_only=True, frozen=True):
    """Tool call ``tool_call_id`` was denied (by its approver, or because the approval expired):
    it did not run."""

    tool_call_id: str
    reason: str | None = None


class SubAgentStart(_ChunkBase, tag="subagent_start", kw_only=True, frozen=True):
    """A sub-agent started for tool call ``call_id``; its own chunks carry ``sub_session_id``."""

    step: int
    sub_agent_type: str
    sub_session_id: str
    call_id: str


class SubAgentEnd(_ChunkBase, tag="subagent_end", kw_only=True, frozen=True):
    """A sub-agent finished with ``result``."""

    step: int
    sub_agent_type: str
    sub_session_id: str
    call_id: str
    result: Any = None


class CustomEvent(_ChunkBase, tag="custom", kw_only=True, frozen=True):
    """An application event emitted by a tool with ``context.emit(event_name, data)``."""

    event_name: str
    data: Any = None


class PatchOperation(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One RFC 6902 operation of a state patch (``add``, ``remove`` or ``replace``)."""

    op: Literal["add", "remove", "replace"]
    path: str
    value: Any = None


class StatePatch(_ChunkBase, tag="state_patch", kw_only=True, frozen=True):
    """The agent's state changed; apply ``patches`` in order (RFC 6902)."""

    patches: list[PatchOperation]


class ErrorChunk(_ChunkBase, tag="error", kw_only=True, frozen=True):
    """The run hit an error at ``step``; ``code`` classifies it, ``recoverable`` says if retrying helps."""

    error: str
    code: str | None = None
    recoverable: bool
    step: int


class OutputChunk(_ChunkBase, tag="output", kw_only=True, frozen=True):
    """The run's final structured output."""

    output: Any = None


# -- run lifecycle ----------------------------------------------------------------------------


class RunInterrupted(_ChunkBase, tag="run_interrupted", kw_only=True, frozen=True):
    """Run ``run_id`` stopped at a safe point after ``step`` (for example a user's stop request)."""

    run_id: str
    step: int
    reason: str


class RunResumed(_ChunkBase, tag="run_resumed", kw_only=True, frozen=True):
    """Run ``run_id`` continues at ``step`` after a pause or an interruption."""

    run_id: str
    step: int
    reason: str


class RunPaused(_ChunkBase, tag="run_paused", kw_only=True, frozen=True):
    """Run ``run_id`` waits on a human: ``reason`` is ``client_tool``, ``approval`` or ``children``.

    ``pending_tool_call_ids`` lists the tool calls whose result or decision the run waits for.
    """

    run_id: str
    step: int
    reason: Literal["client_tool", "approval", "children"]
    pending_tool_call_ids: list[str] = []


class CheckpointCreated(_ChunkBase, tag="checkpoint_created", kw_only=True, frozen=True):
    """Checkpoint ``checkpoint_id`` holds the run's state after ``step`` (``message_count`` messages)."""

    run_id: str
    checkpoint_id: str
    step: int
    message_count: int


class StepCommitted(_ChunkBase, tag="step_committed", kw_only=True, frozen=True):
    """Step ``step`` of run ``run_id`` is durable: its messages and state are in the database."""

    run_id: str
    step: int
    message_count: int


class StepDiscarded(_ChunkBase, tag="step_discarded", kw_only=True, frozen=True):
    """The uncommitted ``step`` of a dead attempt is void: drop chunks ``from_sequence``..``to_sequence``."""

    run_id: str
    step: int
    attempt: int
    from_sequence: int
    to_sequence: int
    reason: str


class StreamResync(_ChunkBase, tag="stream_resync", kw_only=True, frozen=True):
    """A new attempt took run ``run_id`` over; reload the snapshot and continue after ``last_good_sequence``."""

    run_id: str
    reason: str
    attempt: int
    checkpoint_id: str | None = None
    last_good_sequence: int


class ExecutorSuperseded(_ChunkBase, tag="executor_superseded", kw_only=True, frozen=True):
    """The executor holding fencing ``epoch`` lost run ``run_id`` to ``current_epoch`` and stopped."""

    run_id: str
    epoch: int
    current_epoch: int


Chunk: TypeAlias = (
    TextDelta
    | Thinking
    | ToolStart
    | ToolEnd
    | ToolArgStreamStart
    | ToolArgStreamDelta
    | ToolArgStreamEnd
    | ToolInputError
    | ToolOutputError
    | ToolApprovalRequest
    | ToolOutputDenied
    | SubAgentStart
    | SubAgentEnd
    | CustomEvent
    | StatePatch
    | ErrorChunk
    | OutputChunk
    | RunInterrupted
    | RunResumed
    | RunPaused
    | CheckpointCreated
    | StepCommitted
    | StepDiscarded
    | StreamResync
    | ExecutorSuperseded
)

_CHUNK_CLASSES: tuple[type[_ChunkBase], ...] = Chunk.__args__  # type: ignore[attr-defined]
CHUNK_TYPES: dict[str, type[_ChunkBase]] = {str(cls.__struct_config__.tag): cls for cls in _CHUNK_CLASSES}
"""Every chunk class by its wire ``type``."""


class StoredChunk(NamedTuple):
    """A chunk with the sequence the store gave it; unpacks as ``(chunk, sequence)``."""

    chunk: Chunk
    sequence: int


_make_stored = functools.partial(tuple.__new__, StoredChunk)  # no Python frame per item


def stored_chunks(chunks: list[Chunk], first_sequence: int) -> list[StoredChunk]:
    """Pair consecutive chunks with their sequences, ``first_sequence`` onwards."""
    sequences = range(first_sequence, first_sequence + len(chunks))
    return list(map(_make_stored, zip(chunks, sequences, strict=True)))


# -- encoding and validation -----------------------------------------------------------------

_encoder = msgspec.json.Encoder()
_chunk_decoder = msgspec.json.Decoder(Chunk)
_chunk_list_decoder = msgspec.json.Decoder(list[Chunk])

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
        if isinstance(obj, _CHUNK_CLASSES):
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


def is_chunk(obj: object) -> TypeGuard[Chunk]:
    """True for any typed chunk."""
    return isinstance(obj, _CHUNK_CLASSES)


# -- end sentinel and wire events ------------------------------------------------------------


class StreamEnd(msgspec.Struct, frozen=True, kw_only=True):
    """Marks the end of a stream in a sequence of chunks: ``status`` is ``ended`` or ``failed``."""

    status: Literal["ended", "failed"]
    error: str | None = None


def is_stream_end(obj: object) -> TypeGuard[StreamEnd]:
    """True for the end sentinel."""
    return isinstance(obj, StreamEnd)


class _EventBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True):
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


def is_text_delta_chunk(obj: object) -> TypeGuard[TextDelta]:
    """True for a ``text_delta`` chunk."""
    return isinstance(obj, TextDelta)


def is_thinking_chunk(obj: object) -> TypeGuard[Thinking]:
    """True for a ``thinking`` chunk."""
    return isinstance(obj, Thinking)


def is_tool_start_chunk(obj: object) -> TypeGuard[ToolStart]:
    """True for a ``tool_start`` chunk."""
    return isinstance(obj, ToolStart)


def is_tool_end_chunk(obj: object) -> TypeGuard[ToolEnd]:
    """True for a ``tool_end`` chunk."""
    return isinstance(obj, ToolEnd)


def is_subagent_start_chunk(obj: object) -> TypeGuard[SubAgentStart]:
    """True for a ``subagent_start`` chunk."""
    return isinstance(obj, SubAgentStart)


def is_subagent_end_chunk(obj: object) -> TypeGuard[SubAgentEnd]:
    """True for a ``subagent_end`` chunk."""
    return isinstance(obj, SubAgentEnd)


def is_custom_event_chunk(obj: object) -> TypeGuard[CustomEvent]:
    """True for a ``custom`` chunk."""
    return isinstance(obj, CustomEvent)


def is_state_patch_chunk(obj: object) -> TypeGuard[StatePatch]:
    """True for a ``state_patch`` chunk."""
    return isinstance(obj, StatePatch)


def is_error_chunk(obj: object) -> TypeGuard[ErrorChunk]:
    """True for an ``error`` chunk."""
    return isinstance(obj, ErrorChunk)


def is_output_chunk(obj: object) -> TypeGuard[OutputChunk]:
    """True for an ``output`` chunk."""
    return isinstance(obj, OutputChunk)


__all__ += [
    "is_custom_event_chunk",
    "is_error_chunk",
    "is_output_chunk",
    "is_state_patch_chunk",
    "is_subagent_end_chunk",
    "is_subagent_start_chunk",
    "is_text_delta_chunk",
    "is_thinking_chunk",
    "is_tool_end_chunk",
    "is_tool_start_chunk",
]
