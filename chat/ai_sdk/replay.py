"""Content replay: partial content → the events that rebuild it at the head of a resumed stream.

A resumed stream either replays the run's content so far (one delta per block) or, when the
client shows it already (a snapshot's ``-partial`` message), re-announces only the calls still in
flight. Either way the transformer then continues from where the client is
(:meth:`~chat.ai_sdk.transformer.StreamTransformer.resume_from`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from chat.ai_sdk import events as ui
from chat.ai_sdk.partial import PartialContent, ReasoningSegment, TextSegment, ToolSegment

__all__ = ["Replay", "has_replay_content", "replay_events", "unfinished_tool_events"]


class Replay(NamedTuple):
    """The events that rebuild some content, and the ids of the blocks they leave open."""

    events: list[ui.UIMessageChunk]
    text_block: str | None
    reasoning_block: str | None


def has_replay_content(content: PartialContent | None) -> bool:
    """Whether there is anything to show (text, reasoning or a tool call)."""
    return content is not None and not content.is_empty()


def _tool_events(tool: ToolSegment) -> list[ui.UIMessageChunk]:
    call_id, name = tool.tool_call_id, tool.tool_name
    if tool.state == "streaming":
        events: list[ui.UIMessageChunk] = [ui.ToolInputStartChunk(tool_call_id=call_id, tool_name=name, dynamic=True)]
        if tool.input_text:
            events.append(ui.ToolInputDeltaChunk(tool_call_id=call_id, input_text_delta=tool.input_text))
        return events
    if tool.input_failed:
        error = tool.error or ""
        return [
            ui.ToolInputErrorChunk(
                tool_call_id=call_id, tool_name=name, input=tool.input, error_text=error, dynamic=True
            )
        ]
    events = [ui.ToolInputAvailableChunk(tool_call_id=call_id, tool_name=name, input=tool.input, dynamic=True)]
    if tool.approval_id is not None:
        events.append(ui.ToolApprovalRequestChunk(approval_id=tool.approval_id, tool_call_id=call_id))
    if tool.state == "denied":
        events.append(ui.ToolOutputDeniedChunk(tool_call_id=call_id))
    elif tool.state == "completed":
        events.append(ui.ToolOutputAvailableChunk(tool_call_id=call_id, output=tool.output, dynamic=True))
    elif tool.state == "error":
        events.append(
            ui.ToolOutputErrorChunk(tool_call_id=call_id, error_text=tool.error or "Tool failed", dynamic=True)
        )
    return events


_BLOCK_EVENTS: dict[type, tuple[Callable[..., ui.UIMessageChunk], ...]] = {
    TextSegment: (ui.TextStartChunk, ui.TextDeltaChunk, ui.TextEndChunk),
    ReasoningSegment: (ui.ReasoningStartChunk, ui.ReasoningDeltaChunk, ui.ReasoningEndChunk),
}


def replay_events(content: PartialContent, new_block_id: Callable[[], str]) -> Replay:
    """The events that rebuild ``content`` in a started message, one delta per block; the blocks
    still open are left open, for the live stream to continue."""
    events: list[ui.UIMessageChunk] = []
    open_blocks: dict[type, str] = {}
    for segment in content.segments:
        if isinstance(segment, ToolSegment):
            events += _tool_events(segment)
            continue
        if isinstance(segment, ReasoningSegment) and not segment.text and not segment.open:
            continue
        start, delta, end = _BLOCK_EVENTS[type(segment)]
        block = new_block_id()
        events.append(start(id=block))
        if segment.text:
            events.append(delta(id=block, delta=segment.text))
        if segment.open:
            open_blocks[type(segment)] = block
        else:
            events.append(end(id=block))
    return Replay(events, open_blocks.get(TextSegment), open_blocks.get(ReasoningSegment))


def unfinished_tool_events(content: PartialContent) -> list[ui.UIMessageChunk]:
    """Events that re-announce the calls of ``content`` from the first one still in flight on
    (with the results of those that finished since). A stream resumed without replay opens them
    in the message it builds, so their results land there and their order is kept."""
    events: list[ui.UIMessageChunk] = []
    for segment in content.segments[content.first_unfinished() :]:
        if isinstance(segment, ToolSegment):
            events += _tool_events(segment)
    return events
