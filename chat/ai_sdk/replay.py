"""Content replay: partial content → the events that rebuild it at the head of a resumed stream."""

from __future__ import annotations

from collections.abc import Callable

from chat.ai_sdk.messages import UIMessage
from chat.ai_sdk.partial import PartialContent, ReasoningSegment, TextSegment, ToolSegment
from chat.ai_sdk.transformer import StreamTransformer, UIEvent

__all__ = [
    "continue_transformer",
    "create_replay_events",
    "has_replay_content",
    "partial_message",
    "unfinished_tool_events",
]


def has_replay_content(content: PartialContent | None) -> bool:
    """Whether there is anything to show (text, reasoning or a tool call)."""
    return content is not None and not content.is_empty()


def _tool_events(tool: ToolSegment) -> list[UIEvent]:
    call = {"toolCallId": tool.tool_call_id, "dynamic": True}
    if tool.state == "streaming":
        events: list[UIEvent] = [{"type": "tool-input-start", **call, "toolName": tool.tool_name}]
        if tool.input_text:
            events.append(
                {"type": "tool-input-delta", "toolCallId": tool.tool_call_id, "inputTextDelta": tool.input_text}
            )
        return events
    if tool.input_failed:
        return [
            {
                "type": "tool-input-error",
                **call,
                "toolName": tool.tool_name,
                "input": tool.input,
                "errorText": tool.error,
            }
        ]
    events = [{"type": "tool-input-available", **call, "toolName": tool.tool_name, "input": tool.input}]
    if tool.approval_id is not None:
        events.append(
            {"type": "tool-approval-request", "approvalId": tool.approval_id, "toolCallId": tool.tool_call_id}
        )
    if tool.state == "denied":
        events.append({"type": "tool-output-denied", "toolCallId": tool.tool_call_id})
    elif tool.state == "completed":
        events.append({"type": "tool-output-available", **call, "output": tool.output})
    elif tool.state == "error":
        events.append({"type": "tool-output-error", **call, "errorText": tool.error or "Tool failed"})
    return events


def create_replay_events(
    content: PartialContent,
    generate_block_id: Callable[[], str],
    generate_message_id: Callable[[str | None], str],
    agent_id: str | None = None,
) -> tuple[list[UIEvent], str, str | None, str | None]:
    """``start`` and the events that rebuild ``content``, one delta per block.

    Returns ``(events, message_id, text_block_id, reasoning_block_id)``: the ids of the blocks
    left open, which the live stream continues (see :func:`continue_transformer`).
    """
    message_id = generate_message_id(agent_id or content.agent_id)
    events: list[UIEvent] = [{"type": "start", "messageId": message_id}]
    text_block: str | None = None
    reasoning_block: str | None = None
    for segment in content.segments:
        if isinstance(segment, ToolSegment):
            events += _tool_events(segment)
            continue
        kind = "text" if isinstance(segment, TextSegment) else "reasoning"
        if isinstance(segment, ReasoningSegment) and not segment.text and not segment.open:
            continue
        block = generate_block_id()
        events.append({"type": f"{kind}-start", "id": block})
        if segment.text:
            events.append({"type": f"{kind}-delta", "id": block, "delta": segment.text})
        if segment.open:
            if kind == "text":
                text_block = block
            else:
                reasoning_block = block
        else:
            events.append({"type": f"{kind}-end", "id": block})
    return events, message_id, text_block, reasoning_block


def continue_transformer(
    transformer: StreamTransformer,
    content: PartialContent,
    message_id: str,
    text_block_id: str | None,
    reasoning_block_id: str | None,
) -> None:
    """Put ``transformer`` in the state the replay left the client in, so live chunks continue it."""
    transformer.started = True
    transformer.message_id = message_id
    transformer.agent_id = transformer.agent_id or content.agent_id
    transformer.text_block = text_block_id
    transformer.reasoning_block = reasoning_block_id
    for tool in content.tool_calls:
        transformer.tools_known.add(tool.tool_call_id)
        if tool.state == "streaming":
            transformer.tools_started.add(tool.tool_call_id)


def _unfinished_from(content: PartialContent) -> int:
    """Index of the first segment that is a call still in flight (arguments streaming or no
    result yet); ``len(segments)`` when there is none."""
    for index, segment in enumerate(content.segments):
        if isinstance(segment, ToolSegment) and segment.state in ("streaming", "pending", "executing", "approval"):
            return index
    return len(content.segments)


def unfinished_tool_events(content: PartialContent) -> list[UIEvent]:
    """Events that re-announce the calls of ``content`` from the first one still in flight on
    (with the results of those that finished since). A stream resumed without replay opens them
    in the message it builds, so their results land there and their order is kept."""
    events: list[UIEvent] = []
    for segment in content.segments[_unfinished_from(content) :]:
        if isinstance(segment, ToolSegment):
            events += _tool_events(segment)
    return events


def partial_message(content: PartialContent, message_id: str, *, unfinished_tools: bool = True) -> UIMessage:
    """The UI message a snapshot shows for in-flight content when it is not replayed.

    With ``unfinished_tools=False`` it stops before the first call still in flight: a stream
    resumed without replay re-announces the calls from there (:func:`unfinished_tool_events`),
    so each shows once and in order.
    """
    segments = content.segments if unfinished_tools else content.segments[: _unfinished_from(content)]
    parts: list[dict[str, object]] = []
    for segment in segments:
        if isinstance(segment, ToolSegment):
            part: dict[str, object] = {
                "type": "dynamic-tool",
                "toolName": segment.tool_name,
                "toolCallId": segment.tool_call_id,
            }
            if segment.state == "streaming":
                part.update(state="input-streaming", input=None)
            elif segment.state == "completed":
                part.update(state="output-available", input=segment.input, output=segment.output)
            elif segment.state == "error":
                part.update(state="output-error", input=segment.input, errorText=segment.error or "Tool failed")
            elif segment.state == "denied":
                part.update(state="output-denied", input=segment.input)
            elif segment.state == "approval":
                part.update(state="approval-requested", input=segment.input, approval={"id": segment.approval_id})
            else:
                part.update(state="input-available", input=segment.input)
            parts.append(part)
        elif segment.text:
            kind = "text" if isinstance(segment, TextSegment) else "reasoning"
            parts.append({"type": kind, "text": segment.text, "state": "streaming" if segment.open else "done"})
    return {"id": message_id, "role": "assistant", "parts": parts}
