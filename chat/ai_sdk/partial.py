"""Rebuilding the in-flight content of a run from its chunks.

The content is an ordered list of segments (text, reasoning, tool calls) that mirrors the parts
a client built while watching the stream, so it can be shown as a ``-partial`` message in a
snapshot or replayed as events at the head of a resumed stream.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from streams.protocol import (
    Chunk,
    TextDelta,
    Thinking,
    ToolApprovalRequest,
    ToolArgStreamDelta,
    ToolArgStreamEnd,
    ToolArgStreamStart,
    ToolEnd,
    ToolInputError,
    ToolOutputDenied,
    ToolOutputError,
    ToolStart,
)

__all__ = [
    "PartialContent",
    "ReasoningSegment",
    "TextSegment",
    "ToolSegment",
    "copy_partial_content",
    "extend_partial_content",
    "rebuild_partial_content",
]

ToolState = Literal["streaming", "pending", "executing", "approval", "completed", "error", "denied"]
_IN_FLIGHT: frozenset[ToolState] = frozenset({"streaming", "pending", "executing", "approval"})


@dataclass
class TextSegment:
    text: str = ""
    open: bool = True


@dataclass
class ReasoningSegment:
    text: str = ""
    open: bool = True


@dataclass
class ToolSegment:
    tool_call_id: str
    tool_name: str
    state: ToolState = "pending"
    input: Any = None
    input_text: str = ""  # raw argument text streamed so far (state "streaming")
    output: Any = None
    error: str | None = None
    input_failed: bool = False  # the arguments were rejected: the tool never ran
    approval_id: str | None = None  # set while (or since) the call waited for an approval


Segment = TextSegment | ReasoningSegment | ToolSegment


@dataclass
class PartialContent:
    """What a run has shown so far, in order."""

    agent_id: str | None = None
    segments: list[Segment] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments if isinstance(s, TextSegment))

    @property
    def reasoning(self) -> str:
        return "".join(s.text for s in self.segments if isinstance(s, ReasoningSegment))

    @property
    def tool_calls(self) -> list[ToolSegment]:
        return [s for s in self.segments if isinstance(s, ToolSegment)]

    def is_empty(self) -> bool:
        return not any(s.text if not isinstance(s, ToolSegment) else True for s in self.segments)

    def first_unfinished(self) -> int:
        """Index of the first segment that is a call still in flight (arguments streaming or no
        result yet); ``len(segments)`` when there is none."""
        for index, segment in enumerate(self.segments):
            if isinstance(segment, ToolSegment) and segment.state in _IN_FLIGHT:
                return index
        return len(self.segments)


class _Builder:
    def __init__(self, content: PartialContent) -> None:
        self.content = content
        self.tools: dict[str, ToolSegment] = {s.tool_call_id: s for s in content.tool_calls}

    def _last_open(self, kind: type[TextSegment] | type[ReasoningSegment]) -> TextSegment | ReasoningSegment | None:
        segments = self.content.segments
        if segments and isinstance(segments[-1], kind) and segments[-1].open:
            return segments[-1]
        return None

    def _close(self) -> None:
        segments = self.content.segments
        if segments and isinstance(segments[-1], (TextSegment, ReasoningSegment)):
            segments[-1].open = False

    def _tool(self, call_id: str, name: str | None) -> ToolSegment:
        tool = self.tools.get(call_id)
        if tool is None:
            self._close()
            tool = self.tools[call_id] = ToolSegment(call_id, name or "")
            self.content.segments.append(tool)
        return tool

    def add_text(self, text: str) -> None:
        segment = self._last_open(TextSegment)
        if segment is None:
            self._close()
            segment = TextSegment()
            self.content.segments.append(segment)
        segment.text += text

    def add(self, chunk: Chunk) -> None:
        if isinstance(chunk, TextDelta):
            self.add_text(chunk.delta)
        elif isinstance(chunk, Thinking):
            segment = self._last_open(ReasoningSegment)
            if segment is None:
                if not chunk.content and chunk.is_complete:
                    return
                self._close()
                segment = ReasoningSegment()
                self.content.segments.append(segment)
            segment.text += chunk.content
            segment.open = not chunk.is_complete
        elif isinstance(chunk, ToolArgStreamStart):
            self._tool(chunk.tool_call_id, chunk.tool_name).state = "streaming"
        elif isinstance(chunk, ToolArgStreamDelta):
            tool = self.tools.get(chunk.tool_call_id)
            if tool is not None and tool.state == "streaming":
                tool.input_text += chunk.delta
        elif isinstance(chunk, (ToolArgStreamEnd, ToolStart)):
            tool = self._tool(chunk.tool_call_id, chunk.tool_name)
            tool.input, tool.input_text = chunk.arguments, ""
            if tool.state in ("streaming", "pending"):
                tool.state = "executing" if isinstance(chunk, ToolStart) else "pending"
        elif isinstance(chunk, ToolEnd):
            tool = self.tools.get(chunk.tool_call_id)
            if tool is not None:
                tool.state = "completed" if chunk.success else "error"
                tool.output, tool.error = chunk.result, (None if chunk.success else chunk.error or "Tool failed")
        elif isinstance(chunk, ToolInputError):
            tool = self._tool(chunk.tool_call_id, chunk.tool_name)
            tool.state, tool.input, tool.error, tool.input_failed = "error", chunk.input, chunk.error, True
        elif isinstance(chunk, ToolOutputError):
            tool = self.tools.get(chunk.tool_call_id)
            if tool is not None:
                tool.state, tool.error = "error", chunk.error
        elif isinstance(chunk, ToolApprovalRequest):
            tool = self.tools.get(chunk.tool_call_id)
            if tool is not None:
                tool.state, tool.approval_id = "approval", chunk.approval_id
        elif isinstance(chunk, ToolOutputDenied):
            tool = self.tools.get(chunk.tool_call_id)
            if tool is not None:
                tool.state = "denied"


def rebuild_partial_content(chunks: Iterable[Chunk | tuple[Chunk, int]], agent_id: str | None = None) -> PartialContent:
    """The content shown by ``chunks`` (a run's, in order), counting only the run's own agent
    (``agent_id``, else the first chunk's); sub-agents' chunks and data events are not content."""
    return extend_partial_content(PartialContent(agent_id=agent_id), chunks)


def extend_partial_content(content: PartialContent, chunks: Iterable[Chunk | tuple[Chunk, int]]) -> PartialContent:
    """``content`` (changed in place, and returned) with what the run's next ``chunks`` show."""
    builder = _Builder(content)
    text: list[str] = []  # consecutive text deltas, joined once (an answer is thousands of them)
    for item in chunks:
        chunk = item[0] if isinstance(item, tuple) else item
        if content.agent_id is None:
            content.agent_id = chunk.agent_id
        if chunk.agent_id != content.agent_id:
            continue
        if type(chunk) is TextDelta:
            text.append(chunk.delta)
            continue
        if text:
            builder.add_text("".join(text))
            text.clear()
        builder.add(chunk)
    if text:
        builder.add_text("".join(text))
    return content


def copy_partial_content(content: PartialContent) -> PartialContent:
    """A copy of ``content`` that :func:`extend_partial_content` can extend without changing
    ``content`` (the builder replaces segments' values, never changes them inside)."""
    return PartialContent(agent_id=content.agent_id, segments=[copy.copy(s) for s in content.segments])
