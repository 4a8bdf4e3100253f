"""The chunk types: one frozen ``msgspec.Struct`` per wire ``type``, and the :data:`Chunk` union.

Chunks mirror the stream protocol of the TypeScript Helix Agents core (``StreamChunk``), extended
with the run-lifecycle, checkpoint and recovery chunks Helix for Django needs. On the wire a chunk
is one JSON object whose ``type`` field selects the class, whose field names are camelCase, and
which may carry no unknown field; Python attributes are snake_case (``chunk.agent_id`` is
``"agentId"`` on the wire).
"""

from __future__ import annotations

import time
from typing import Any, Literal, TypeAlias, TypeGuard

import msgspec


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
    """The wire form every chunk shares. Each chunk declares the envelope itself — the emitting
    agent (``agent_id``, ``agent_type``) and a millisecond ``timestamp`` — where the protocol
    places it, so a chunk encodes with its keys in the documented order."""


# -- content ----------------------------------------------------------------------------------


class TextDelta(_ChunkBase, tag="text_delta", kw_only=True, frozen=True):
    """A piece of the model's answer text."""

    delta: str
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class Thinking(_ChunkBase, tag="thinking", kw_only=True, frozen=True):
    """A piece of the model's reasoning; ``is_complete`` marks the end of a reasoning block."""

    content: str
    is_complete: bool
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class ToolStart(_ChunkBase, tag="tool_start", kw_only=True, frozen=True):
    """A tool call with its complete arguments is about to execute."""

    tool_call_id: str
    tool_name: str
    arguments: Any
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class ToolEnd(_ChunkBase, tag="tool_end", kw_only=True, frozen=True):
    """A tool call finished; ``success`` is false and ``error`` set when it raised."""

    tool_call_id: str
    result: Any
    success: bool
    error: str | None = None
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class ToolArgStreamStart(_ChunkBase, tag="tool_arg_stream_start", kw_only=True, frozen=True):
    """The model began streaming the arguments of a tool call."""

    tool_call_id: str
    tool_name: str
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class ToolArgStreamDelta(_ChunkBase, tag="tool_arg_stream_delta", kw_only=True, frozen=True):
    """A fragment of a tool call's raw JSON argument text, in order."""

    tool_call_id: str
    delta: str
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class ToolArgStreamEnd(_ChunkBase, tag="tool_arg_stream_end", kw_only=True, frozen=True):
    """The arguments of a tool call are complete; ``arguments`` holds them parsed."""

    tool_call_id: str
    tool_name: str
    arguments: Any
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class ToolInputError(_ChunkBase, tag="tool_input_error", kw_only=True, frozen=True):
    """The model's arguments for a tool were unparseable or failed the tool's input schema.

    ``input`` is what the model sent (the raw text when it was not JSON); the tool did not run.
    """

    tool_call_id: str
    tool_name: str
    input: Any = None
    error: str
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class ToolOutputError(_ChunkBase, tag="tool_output_error", kw_only=True, frozen=True):
    """A tool call produced no usable output (it raised, timed out, or its result was rejected)."""

    tool_call_id: str
    tool_name: str | None = None
    error: str
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class ToolApprovalRequest(_ChunkBase, tag="tool_approval_request", kw_only=True, frozen=True):
    """Tool call ``tool_call_id`` waits for a person to approve it; ``approval_id`` names the
    server-side approval record the decision must answer."""

    tool_call_id: str
    approval_id: str
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class ToolOutputDenied(_ChunkBase, tag="tool_output_denied", kw_only=True, frozen=True):
    """Tool call ``tool_call_id`` was denied (by its approver, or because the approval expired):
    it did not run."""

    tool_call_id: str
    reason: str | None = None
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class SubAgentStart(_ChunkBase, tag="subagent_start", kw_only=True, frozen=True):
    """A sub-agent started for tool call ``call_id``; its own chunks carry ``sub_session_id``."""

    agent_id: str
    agent_type: str  # required here: the parent agent's type
    timestamp: int
    step: int
    sub_agent_type: str
    sub_session_id: str
    call_id: str


class SubAgentEnd(_ChunkBase, tag="subagent_end", kw_only=True, frozen=True):
    """A sub-agent finished with ``result``."""

    agent_id: str
    agent_type: str  # required here: the parent agent's type
    timestamp: int
    step: int
    sub_agent_type: str
    sub_session_id: str
    call_id: str
    result: Any


class CustomEvent(_ChunkBase, tag="custom", kw_only=True, frozen=True):
    """An application event emitted by a tool with ``context.emit(event_name, data)``."""

    event_name: str
    data: Any
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class PatchOperation(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One RFC 6902 operation of a state patch (``add``, ``remove`` or ``replace``)."""

    op: Literal["add", "remove", "replace"]
    path: str
    value: Any = None


class StatePatch(_ChunkBase, tag="state_patch", kw_only=True, frozen=True):
    """The agent's state changed; apply ``patches`` in order (RFC 6902)."""

    patches: list[PatchOperation]
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class ErrorChunk(_ChunkBase, tag="error", kw_only=True, frozen=True):
    """The run hit an error at ``step``; ``code`` classifies it, ``recoverable`` says if retrying helps."""

    error: str
    code: str | None = None
    recoverable: bool
    agent_id: str
    agent_type: str | None = None
    timestamp: int
    step: int


class OutputChunk(_ChunkBase, tag="output", kw_only=True, frozen=True):
    """The run's final structured output."""

    output: Any
    agent_id: str
    agent_type: str | None = None
    timestamp: int


# -- run lifecycle ----------------------------------------------------------------------------


class RunInterrupted(_ChunkBase, tag="run_interrupted", kw_only=True, frozen=True):
    """Run ``run_id`` stopped at a safe point after ``step`` (for example a user's stop request)."""

    run_id: str
    step: int
    reason: str
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class RunResumed(_ChunkBase, tag="run_resumed", kw_only=True, frozen=True):
    """Run ``run_id`` continues at ``step`` after a pause or an interruption."""

    run_id: str
    step: int
    reason: str
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class RunPaused(_ChunkBase, tag="run_paused", kw_only=True, frozen=True):
    """Run ``run_id`` waits on a human: ``reason`` is ``client_tool``, ``approval`` or ``children``.

    ``pending_tool_call_ids`` lists the tool calls whose result or decision the run waits for.
    """

    run_id: str
    step: int
    reason: Literal["client_tool", "approval", "children"]
    pending_tool_call_ids: list[str] = []
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class CheckpointCreated(_ChunkBase, tag="checkpoint_created", kw_only=True, frozen=True):
    """Checkpoint ``checkpoint_id`` holds the run's state after ``step`` (``message_count`` messages)."""

    run_id: str
    checkpoint_id: str
    step: int
    message_count: int
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class StepCommitted(_ChunkBase, tag="step_committed", kw_only=True, frozen=True):
    """Step ``step`` of run ``run_id`` is durable: its messages and state are in the database."""

    run_id: str
    step: int
    message_count: int
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class StepDiscarded(_ChunkBase, tag="step_discarded", kw_only=True, frozen=True):
    """The uncommitted ``step`` of a dead attempt is void: drop chunks ``from_sequence``..``to_sequence``."""

    run_id: str
    step: int
    attempt: int
    from_sequence: int
    to_sequence: int
    reason: str
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class StreamResync(_ChunkBase, tag="stream_resync", kw_only=True, frozen=True):
    """A new attempt took run ``run_id`` over; reload the snapshot and continue after ``last_good_sequence``."""

    run_id: str
    reason: str
    attempt: int
    checkpoint_id: str | None = None
    last_good_sequence: int
    agent_id: str
    agent_type: str | None = None
    timestamp: int


class ExecutorSuperseded(_ChunkBase, tag="executor_superseded", kw_only=True, frozen=True):
    """The executor holding fencing ``epoch`` lost run ``run_id`` to ``current_epoch`` and stopped."""

    run_id: str
    epoch: int
    current_epoch: int
    agent_id: str
    agent_type: str | None = None
    timestamp: int


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

CHUNK_CLASSES: tuple[type[_ChunkBase], ...] = Chunk.__args__
CHUNK_TYPES: dict[str, type[_ChunkBase]] = {str(cls.__struct_config__.tag): cls for cls in CHUNK_CLASSES}
"""Every chunk class by its wire ``type``."""


StoredChunk: TypeAlias = tuple[Chunk, int]
"""A chunk with the sequence the store gave it: a plain ``(chunk, sequence)`` pair.

A plain tuple, not a named one: a replay makes one per chunk, tens of thousands at a time. A
tuple subclass costs about five times as much to build, and the garbage collector never stops
tracking it (it untracks plain tuples that hold no container), so every later collection walks it
again."""


def stored_chunks(chunks: list[Chunk], first_sequence: int) -> list[StoredChunk]:
    """Pair consecutive chunks with their sequences, ``first_sequence`` onwards."""
    if len(chunks) == 1:  # a live notification's usual batch
        return [(chunks[0], first_sequence)]
    return list(zip(chunks, range(first_sequence, first_sequence + len(chunks)), strict=True))


def is_chunk(obj: object) -> TypeGuard[Chunk]:
    """True for any typed chunk."""
    return isinstance(obj, CHUNK_CLASSES)
