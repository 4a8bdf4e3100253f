"""The model's part of a step: one streamed completion turned into chunks, the assistant message
and the tool calls it asks for.

Reasoning becomes ``thinking`` chunks, closed by an empty one marked complete when the text or a
tool call begins; text becomes ``text_delta`` chunks; streamed tool arguments become
``tool_arg_stream_start`` / ``_delta`` / ``_end``. Token usage adds up in the run's ``usage``.
A stop request is checked between events; what was streamed so far is kept in a
:class:`TurnProgress`, so a stopped run can keep it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from streams.messages import StoredMessage, ToolCall
from streams.protocol import TextDelta, Thinking, ToolArgStreamDelta, ToolArgStreamEnd, ToolArgStreamStart
from workers.llm.base import ReasoningDelta, TextPiece, ToolCallDelta, ToolCallEnd, ToolCallStart, Usage
from workers.runtime.agents import Agent
from workers.runtime.tools import ParsedCall
from workers.runtime.writer import RunWriter

__all__ = ["TurnProgress", "stream_turn"]


@dataclass
class TurnProgress:
    """The text and reasoning of a turn streamed so far."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)

    def message(self, message_id: str | None) -> StoredMessage | None:
        """What was streamed, as an assistant message without calls (``None`` when nothing was)."""
        if not self.text and not self.reasoning:
            return None
        return StoredMessage(
            role="assistant", id=message_id, content="".join(self.text), reasoning="".join(self.reasoning) or None
        )


async def stream_turn(
    agent: Agent,
    messages: list[StoredMessage],
    writer: RunWriter,
    *,
    message_id: str | None,
    usage: dict[str, int],
    check_stop: Callable[[], Awaitable[None]],
    progress: TurnProgress | None = None,
) -> tuple[StoredMessage, list[ParsedCall]]:
    """Stream ``agent``'s next message for ``messages``; return it (as ``message_id``) and its calls."""
    definitions = [tool.definition() for tool in agent.tools]
    progress = progress if progress is not None else TurnProgress()
    text, reasoning = progress.text, progress.reasoning
    reasoning_open = False
    streamed: set[str] = set()
    ends: list[ToolCallEnd] = []
    async for event in agent.model().stream(agent.system_prompt, messages, definitions):
        await check_stop()
        if isinstance(event, ReasoningDelta):
            reasoning.append(event.text)
            reasoning_open = True
            await writer.emit(Thinking, content=event.text, is_complete=False)
            continue
        if reasoning_open:
            reasoning_open = False
            await writer.emit(Thinking, content="", is_complete=True)
        if isinstance(event, TextPiece):  # the hot path
            text.append(event.text)
            await writer.emit(TextDelta, delta=event.text)
        elif isinstance(event, ToolCallStart):
            streamed.add(event.call_id)
            await writer.emit(ToolArgStreamStart, tool_call_id=event.call_id, tool_name=event.name)
        elif isinstance(event, ToolCallDelta):
            await writer.emit(ToolArgStreamDelta, tool_call_id=event.call_id, delta=event.arguments)
        elif isinstance(event, ToolCallEnd):
            ends.append(event)
        elif isinstance(event, Usage):
            usage["prompt_tokens"] += event.prompt_tokens
            usage["completion_tokens"] += event.completion_tokens
    if reasoning_open:
        await writer.emit(Thinking, content="", is_complete=True)
    calls = [ParsedCall(end.call_id, end.name, end.arguments, agent.tool(end.name)) for end in ends]
    for call in calls:
        if call.call_id in streamed and not isinstance(call.arguments, str):
            await writer.emit(
                ToolArgStreamEnd, tool_call_id=call.call_id, tool_name=call.name, arguments=call.arguments
            )
    assistant = StoredMessage(
        role="assistant",
        id=message_id,
        content="".join(text),
        reasoning="".join(reasoning) or None,
        tool_calls=[ToolCall(id=c.call_id, name=c.name, arguments=c.arguments) for c in calls],
    )
    return assistant, calls
