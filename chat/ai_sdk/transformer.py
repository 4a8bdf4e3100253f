"""Helix chunks → the AI SDK UI message stream chunks of one assistant message.

Only the chunk types and fields every 6.x client accepts are emitted (the 6.0.0 field set of the
strict clients up to 6.0.230, see :mod:`chat.ai_sdk.events`): no sequence or other extra key ever
goes inside an event. One transformer builds one assistant message: ``start`` with the message id
first, ``finish`` last. It is a pure encoder that owns its state: a resumed stream puts it in the
state the client is in through :meth:`StreamTransformer.resume_from`, never by editing it.

Which chunks become message parts, and which only reach ``onData``:

* text, reasoning and the tool lifecycle of the run's own agent become parts; every tool event
  carries ``dynamic: true`` (the client looks tool parts up by kind, so a single missing flag
  would split a call into two parts);
* every other chunk becomes a transient ``data-*`` event (:mod:`chat.ai_sdk.data_events`), and so
  does every chunk of a sub-agent (another ``agentId``);
* ``error`` closes open blocks, then emits ``error`` (the client stops there).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from chat.ai_sdk.data_events import DATA_EVENTS, subagent_chunk
from chat.ai_sdk.events import (
    ErrorChunk,
    FinishChunk,
    FinishReason,
    FinishStepChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolInputDeltaChunk,
    ToolInputErrorChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
    UIMessageChunk,
)
from chat.ai_sdk.partial import PartialContent
from streams import protocol
from streams.protocol import Chunk
from streams.protocol.codec import parse_chunk

__all__ = ["StreamTransformer", "default_message_id"]

_logger = logging.getLogger(__name__)
Events = list[UIMessageChunk]


def default_message_id(agent_id: str | None = None) -> str:
    """A fresh assistant message id."""
    return f"msg-{uuid.uuid4().hex}"


class StreamTransformer:
    """Turns the chunks of one run into the events of one assistant message.

    ``transform(chunk, sequence)`` returns ``(events, sequence)``; ``finalize()`` closes what is
    open and returns the closing events (``finish`` last). ``message_id`` fixes the id sent in
    ``start`` (a continuation reuses the client's message id); otherwise ``generate_message_id``
    (called with the first chunk's agent id) or a random id. ``chunk_filter`` drops chunks it
    returns false for; ``include_step_events`` adds ``start-step``/``finish-step`` (a step ends
    at ``step_committed``). ``known_tool_calls``: calls the client already shows, whose results
    may arrive (a continuation that answers them).
    """

    def __init__(
        self,
        generate_message_id: Callable[[str | None], str] | None = None,
        include_step_events: bool = False,
        chunk_filter: Callable[[Chunk], bool] | None = None,
        logger: logging.Logger | None = None,
        *,
        message_id: str | None = None,
        agent_id: str | None = None,
        known_tool_calls: Iterable[str] = (),
    ) -> None:
        self.generate_message_id = generate_message_id or default_message_id
        self.include_step_events = include_step_events
        self.chunk_filter = chunk_filter
        self.logger = logger or _logger
        self.message_id = message_id
        self.agent_id = agent_id  # the run's own agent; the first chunk's when not given
        self._started = False
        self._finished = False
        self._text_block: str | None = None
        self._reasoning_block: str | None = None
        self._step_open = False
        self._tools_streaming: set[str] = set()  # tool-input-start sent, input still streaming
        self._tools_known: set[str] = set(known_tool_calls)  # a tool part exists on the client
        self._blocks = 0

    # -- starting and resuming ---------------------------------------------------------------

    def new_block_id(self, kind: str) -> str:
        """A block id unique within this message."""
        self._blocks += 1
        return f"{kind}-{self._blocks}"

    def start(self, agent_id: str | None = None) -> Events:
        """``[start]`` naming the message (its id generated for ``agent_id`` unless fixed), the
        first time; ``[]`` once the message is started."""
        if self._started:
            return []
        self._started = True
        if self.message_id is None:
            self.message_id = self.generate_message_id(agent_id)
        return [StartChunk(message_id=self.message_id)]

    def resume_from(
        self, content: PartialContent, *, text_block: str | None = None, reasoning_block: str | None = None
    ) -> None:
        """Continue a message the client already holds, instead of starting one.

        ``content`` is what the client shows: its calls are known (their results may follow) and
        those still streaming arguments take more deltas. ``text_block`` and ``reasoning_block``
        are the ids of blocks left open on the client, which live deltas continue. No ``start``
        is sent after this: call :meth:`start` first if the client must hear the message's id.
        """
        self._started = True
        if self.agent_id is None:
            self.agent_id = content.agent_id
        self._text_block, self._reasoning_block = text_block, reasoning_block
        for tool in content.tool_calls:
            self._tools_known.add(tool.tool_call_id)
            if tool.state == "streaming":
                self._tools_streaming.add(tool.tool_call_id)

    # -- the mapping -------------------------------------------------------------------------

    def transform(self, chunk: Chunk | dict[str, Any], sequence: int | None = None) -> tuple[Events, int | None]:
        """The events for one chunk (possibly none) and the chunk's sequence, passed through. A
        chunk given as a dict is parsed first (a typed error if it is not a chunk)."""
        if isinstance(chunk, dict):
            chunk = parse_chunk(chunk)
        if self._finished or (self.chunk_filter is not None and not self.chunk_filter(chunk)):
            return [], sequence
        handler = _HANDLERS.get(type(chunk))
        if handler is None:  # an UnknownChunk: every typed chunk has a handler
            self.logger.warning("skipping chunk of unknown type %r", getattr(chunk, "type", type(chunk).__name__))
            return [], sequence
        if self.agent_id is None:
            self.agent_id = chunk.agent_id
        if chunk.agent_id != self.agent_id and not isinstance(chunk, (protocol.SubAgentStart, protocol.SubAgentEnd)):
            events = self.start(self.agent_id)
            events.append(subagent_chunk(chunk))
            return events, sequence
        events = self.start(chunk.agent_id) if not self._started else []
        handler(self, chunk, events)
        return events, sequence

    def open_text_block(self, chunk: protocol.TextDelta) -> str | None:
        """The text block that text delta ``chunk`` only appends to, in the steady state of an
        answer (started, same agent, its text block open, nothing to close or open first, a
        delta to send): ``transform`` would then return exactly one ``text-delta`` on that block
        and change nothing, so a caller may frame that event itself (the replay hot path).
        ``None`` whenever ``transform`` has anything else to do."""
        if (
            self._text_block is None
            or not chunk.delta
            or self._finished
            or self.chunk_filter is not None
            or self._reasoning_block is not None
            or chunk.agent_id != self.agent_id
            or (self.include_step_events and not self._step_open)
        ):
            return None
        return self._text_block

    def finalize(self, finish_reason: FinishReason | None = None) -> Events:
        """Close open blocks (and step) and emit ``finish``; nothing if nothing was started."""
        if self._finished or not self._started:
            self._finished = True
            return []
        self._finished = True
        events: Events = []
        self._close_blocks(events)
        if self._step_open:
            events.append(FinishStepChunk())
            self._step_open = False
        events.append(FinishChunk(finish_reason=finish_reason))
        return events

    # -- blocks and steps --------------------------------------------------------------------

    def _open_step(self, events: Events) -> None:
        if self.include_step_events and not self._step_open:
            self._step_open = True
            events.append(StartStepChunk())

    def _close_text(self, events: Events) -> None:
        if self._text_block is not None:
            events.append(TextEndChunk(id=self._text_block))
            self._text_block = None

    def _close_reasoning(self, events: Events) -> None:
        if self._reasoning_block is not None:
            events.append(ReasoningEndChunk(id=self._reasoning_block))
            self._reasoning_block = None

    def _close_blocks(self, events: Events) -> None:
        self._close_reasoning(events)
        self._close_text(events)

    # -- handlers, one per chunk type --------------------------------------------------------

    def _text(self, chunk: protocol.TextDelta, events: Events) -> None:  # the hot path: no call it can skip
        if self._reasoning_block is not None:
            self._close_reasoning(events)
        if self.include_step_events and not self._step_open:
            self._open_step(events)
        if self._text_block is None:
            self._text_block = self.new_block_id("text")
            events.append(TextStartChunk(id=self._text_block))
        if chunk.delta:
            events.append(TextDeltaChunk(id=self._text_block, delta=chunk.delta))

    def _thinking(self, chunk: protocol.Thinking, events: Events) -> None:
        self._close_text(events)
        self._open_step(events)
        if self._reasoning_block is None:
            if not chunk.content and chunk.is_complete:
                return
            self._reasoning_block = self.new_block_id("reasoning")
            events.append(ReasoningStartChunk(id=self._reasoning_block))
        if chunk.content:
            events.append(ReasoningDeltaChunk(id=self._reasoning_block, delta=chunk.content))
        if chunk.is_complete:
            self._close_reasoning(events)

    def _tool_input(self, events: Events, call_id: str, name: str, arguments: Any) -> None:
        self._close_blocks(events)
        self._open_step(events)
        if call_id in self._tools_known and call_id not in self._tools_streaming:
            return  # already input-available: a second one would re-run client tool handlers
        self._tools_streaming.discard(call_id)
        self._tools_known.add(call_id)
        events.append(ToolInputAvailableChunk(tool_call_id=call_id, tool_name=name, input=arguments, dynamic=True))

    def _tool_arg_start(self, chunk: protocol.ToolArgStreamStart, events: Events) -> None:
        self._close_blocks(events)
        self._open_step(events)
        if chunk.tool_call_id in self._tools_known:
            return
        self._tools_streaming.add(chunk.tool_call_id)
        self._tools_known.add(chunk.tool_call_id)
        events.append(ToolInputStartChunk(tool_call_id=chunk.tool_call_id, tool_name=chunk.tool_name, dynamic=True))

    def _tool_arg_delta(self, chunk: protocol.ToolArgStreamDelta, events: Events) -> None:
        if chunk.tool_call_id not in self._tools_streaming:
            self.logger.warning("tool argument delta for %s without a start: skipped", chunk.tool_call_id)
            return
        events.append(ToolInputDeltaChunk(tool_call_id=chunk.tool_call_id, input_text_delta=chunk.delta))

    def _tool_call(self, chunk: protocol.ToolArgStreamEnd | protocol.ToolStart, events: Events) -> None:
        self._tool_input(events, chunk.tool_call_id, chunk.tool_name, chunk.arguments)

    def _known_call(self, call_id: str, what: str, events: Events) -> bool:
        """Whether the client has a part for ``call_id`` (blocks are then closed); logs if not."""
        if call_id not in self._tools_known:
            self.logger.warning("%s for unknown call %s: skipped", what, call_id)
            return False
        self._close_blocks(events)
        return True

    def _tool_end(self, chunk: protocol.ToolEnd, events: Events) -> None:
        if not self._known_call(chunk.tool_call_id, "tool result", events):
            return
        if chunk.success:
            events.append(ToolOutputAvailableChunk(tool_call_id=chunk.tool_call_id, output=chunk.result, dynamic=True))
        else:
            error = chunk.error or "Tool failed"
            events.append(ToolOutputErrorChunk(tool_call_id=chunk.tool_call_id, error_text=error, dynamic=True))

    def _tool_input_error(self, chunk: protocol.ToolInputError, events: Events) -> None:
        self._close_blocks(events)
        self._open_step(events)
        self._tools_streaming.discard(chunk.tool_call_id)
        self._tools_known.add(chunk.tool_call_id)
        events.append(
            ToolInputErrorChunk(
                tool_call_id=chunk.tool_call_id,
                tool_name=chunk.tool_name,
                input=chunk.input,
                error_text=chunk.error,
                dynamic=True,
            )
        )

    def _tool_output_error(self, chunk: protocol.ToolOutputError, events: Events) -> None:
        if self._known_call(chunk.tool_call_id, "tool output error", events):
            events.append(ToolOutputErrorChunk(tool_call_id=chunk.tool_call_id, error_text=chunk.error, dynamic=True))

    def _tool_approval_request(self, chunk: protocol.ToolApprovalRequest, events: Events) -> None:
        if self._known_call(chunk.tool_call_id, "approval request", events):
            events.append(ToolApprovalRequestChunk(approval_id=chunk.approval_id, tool_call_id=chunk.tool_call_id))

    def _tool_output_denied(self, chunk: protocol.ToolOutputDenied, events: Events) -> None:
        if self._known_call(chunk.tool_call_id, "denial", events):
            events.append(ToolOutputDeniedChunk(tool_call_id=chunk.tool_call_id))

    def _error(self, chunk: protocol.ErrorChunk, events: Events) -> None:
        self._close_blocks(events)
        events.append(ErrorChunk(error_text=chunk.error))

    def _data(self, chunk: Chunk, events: Events) -> None:
        if isinstance(chunk, protocol.StepCommitted) and self.include_step_events and self._step_open:
            self._close_blocks(events)
            events.append(FinishStepChunk())
            self._step_open = False
        events.append(DATA_EVENTS[type(chunk)](chunk))


_HANDLERS: dict[type, Callable[[StreamTransformer, Any, Events], None]] = {
    protocol.TextDelta: StreamTransformer._text,
    protocol.Thinking: StreamTransformer._thinking,
    protocol.ToolArgStreamStart: StreamTransformer._tool_arg_start,
    protocol.ToolArgStreamDelta: StreamTransformer._tool_arg_delta,
    protocol.ToolArgStreamEnd: StreamTransformer._tool_call,
    protocol.ToolStart: StreamTransformer._tool_call,
    protocol.ToolEnd: StreamTransformer._tool_end,
    protocol.ToolInputError: StreamTransformer._tool_input_error,
    protocol.ToolOutputError: StreamTransformer._tool_output_error,
    protocol.ToolApprovalRequest: StreamTransformer._tool_approval_request,
    protocol.ToolOutputDenied: StreamTransformer._tool_output_denied,
    protocol.ErrorChunk: StreamTransformer._error,
    **dict.fromkeys(DATA_EVENTS, StreamTransformer._data),
}
