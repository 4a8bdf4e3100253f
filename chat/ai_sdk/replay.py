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
from chat.ai_sdk.transformer import default_message_id

__all__ = [
    "Replay",
    "ReplayResult",
    "create_replay_events",
    "has_replay_content",
    "replay_events",
    "unfinished_tool_events",
]


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


class ReplayResult(NamedTuple):
    """What :func:`create_replay_events` made: the events, the message id ``start`` named (or
    would have), and the blocks left open for the live stream to continue."""

    events: list[ui.UIMessageChunk]
    message_id: str
    text_block_id: str | None
    reasoning_block_id: str | None


def create_replay_events(
    content: PartialContent,
    *,
    generate_block_id: Callable[[], str] | None = None,
    message_id: str | None = None,
    generate_message_id: Callable[[str | None], str] | None = None,
    agent_id: str | None = None,
    start: bool = True,
) -> ReplayResult:
    """The events of a custom stream that shows ``content`` before going on live: ``start``
    (unless ``start=False``) naming ``message_id``, else ``generate_message_id(agent_id)``, else
    a fresh id, then one delta per block (:func:`replay_events`). Block ids come from
    ``generate_block_id`` (default ``replay-1``, ``replay-2``, …)."""
    if generate_block_id is None:
        count = iter(range(1, 1 << 62))
        generate_block_id = lambda: f"replay-{next(count)}"  # noqa: E731
    name = message_id or (generate_message_id or default_message_id)(agent_id)
    replay = replay_events(content, generate_block_id)
    head: list[ui.UIMessageChunk] = [ui.StartChunk(message_id=name)] if start else []
    return ReplayResult(head + replay.events, name, replay.text_block, replay.reasoning_block)


def unfinished_tool_events(content: PartialContent) -> list[ui.UIMessageChunk]:
    """Events that re-announce the calls of ``content`` from the first one still in flight on
    (with the results of those that finished since). A stream resumed without replay opens them
    in the message it builds, so their results land there and their order is kept."""
    events: list[ui.UIMessageChunk] = []
    for segment in content.segments[content.first_unfinished() :]:
        if isinstance(segment, ToolSegment):
            events += _tool_events(segment)
    return events
