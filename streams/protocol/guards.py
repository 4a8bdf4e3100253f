"""Type guards for the chunk types code most often branches on."""

from __future__ import annotations

from typing import TypeGuard

from streams.protocol.chunks import (
    CustomEvent,
    ErrorChunk,
    OutputChunk,
    StatePatch,
    SubAgentEnd,
    SubAgentStart,
    TextDelta,
    Thinking,
    ToolEnd,
    ToolStart,
)


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
