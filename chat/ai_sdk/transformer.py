"""Helix chunks → AI SDK UI message stream events (``ai`` 6.x ``uiMessageChunkSchema``).

Only the event types and fields every 6.x client accepts are emitted (the 6.0.0 field set of the
strict clients up to 6.0.230): no sequence or other extra key ever goes inside an event. One
transformer builds one assistant message: ``start`` with the message id first, ``finish`` last.

Which chunks become message parts, and which only reach ``onData``:

* text, reasoning and the tool lifecycle of the run's own agent become parts; every tool event
  carries ``dynamic: true`` (the client looks tool parts up by kind, so a single missing flag
  would split a call into two parts);
* every ``data-*`` event is **transient**: sub-agent progress, custom events, state patches, the
  final output and all control-flow events. None of them is persisted in the stored messages, so
  making them parts would make the live message differ from the stored one after a reload.
  State comes with the snapshot; the output with the run;
* chunks of sub-agents (another ``agentId``) are not parts of this message: they are forwarded
  as transient ``data-subagent-chunk`` events carrying the Helix chunk;
* ``error`` closes open blocks, then emits ``error`` (the client stops there).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from streams.protocol import (
    CheckpointCreated,
    Chunk,
    CustomEvent,
    ErrorChunk,
    ExecutorSuperseded,
    OutputChunk,
    RunInterrupted,
    RunPaused,
    RunResumed,
    StatePatch,
    StepCommitted,
    StepDiscarded,
    StreamResync,
    SubAgentEnd,
    SubAgentStart,
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
    UnknownChunk,
    dump_chunk,
)

__all__ = ["CONTROL_EVENTS", "StreamTransformer", "UIEvent", "default_message_id"]

UIEvent = dict[str, Any]

CONTROL_EVENTS: dict[type, str] = {
    RunInterrupted: "data-run-interrupted",
    RunResumed: "data-run-resumed",
    RunPaused: "data-run-paused",
    CheckpointCreated: "data-checkpoint-created",
    StepCommitted: "data-step-committed",
    StepDiscarded: "data-step-discarded",
    StreamResync: "data-stream-resync",
    ExecutorSuperseded: "data-executor-superseded",
}
"""Control-flow chunks and the transient data event each becomes."""

_logger = logging.getLogger(__name__)


def default_message_id(agent_id: str | None = None) -> str:
    """A fresh assistant message id."""
    return f"msg-{uuid.uuid4().hex}"


def _payload(chunk: Chunk) -> dict[str, Any]:
    data = dump_chunk(chunk)
    del data["type"]
    return data


class StreamTransformer:
    """Turns the chunks of one run into the events of one assistant message.

    ``transform(chunk, sequence)`` returns ``(events, sequence)``; ``finalize()`` closes what is
    open and returns the closing events (``finish`` last). ``message_id`` fixes the id sent in
    ``start`` (a continuation reuses the client's message id); otherwise ``generate_message_id``
    (called with the first chunk's agent id) or a random id. ``chunk_filter`` drops chunks it
    returns false for; ``include_step_events`` adds ``start-step``/``finish-step`` (a step ends
    at ``step_committed``).
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
    ) -> None:
        self.generate_message_id = generate_message_id or default_message_id
        self.include_step_events = include_step_events
        self.chunk_filter = chunk_filter
        self.logger = logger or _logger
        self.message_id = message_id
        self.agent_id = agent_id  # the run's own agent; the first chunk's when not given
        self.started = False
        self.finished = False
        self.text_block: str | None = None
        self.reasoning_block: str | None = None
        self.step_open = False
        self.tools_started: set[str] = set()  # tool-input-start sent, input still streaming
        self.tools_known: set[str] = set()  # a tool part exists on the client
        self._blocks = 0

    # -- helpers -----------------------------------------------------------------------------

    def new_block_id(self, kind: str) -> str:
        """A block id unique within this message."""
        self._blocks += 1
        return f"{kind}-{self._blocks}"

    def _start(self, events: list[UIEvent], agent_id: str | None) -> None:
        if not self.started:
            self.started = True
            if self.message_id is None:
                self.message_id = self.generate_message_id(agent_id)
            events.append({"type": "start", "messageId": self.message_id})

    def _open_step(self, events: list[UIEvent]) -> None:
        if self.include_step_events and not self.step_open:
            self.step_open = True
            events.append({"type": "start-step"})

    def close_text(self, events: list[UIEvent]) -> None:
        if self.text_block is not None:
            events.append({"type": "text-end", "id": self.text_block})
            self.text_block = None

    def close_reasoning(self, events: list[UIEvent]) -> None:
        if self.reasoning_block is not None:
            events.append({"type": "reasoning-end", "id": self.reasoning_block})
            self.reasoning_block = None

    def close_blocks(self, events: list[UIEvent]) -> None:
        self.close_reasoning(events)
        self.close_text(events)

    def _tool_input(self, events: list[UIEvent], call_id: str, name: str, arguments: Any) -> None:
        if call_id in self.tools_known and call_id not in self.tools_started:
            return  # already input-available: a second one would re-run client tool handlers
        self.tools_started.discard(call_id)
        self.tools_known.add(call_id)
        events.append(
            {
                "type": "tool-input-available",
                "toolCallId": call_id,
                "toolName": name,
                "input": arguments,
                "dynamic": True,
            }
        )

    # -- the mapping -------------------------------------------------------------------------

    def transform(self, chunk: Chunk, sequence: int | None = None) -> tuple[list[UIEvent], int | None]:
        """The events for one chunk (possibly none) and the chunk's sequence, passed through."""
        if self.finished or (self.chunk_filter is not None and not self.chunk_filter(chunk)):
            return [], sequence
        if isinstance(chunk, UnknownChunk):
            self.logger.warning("skipping chunk of unknown type %r", chunk.type)
            return [], sequence
        events: list[UIEvent] = []
        if self.agent_id is None:
            self.agent_id = chunk.agent_id
        if chunk.agent_id != self.agent_id and not isinstance(chunk, (SubAgentStart, SubAgentEnd)):
            self._start(events, self.agent_id)
            events.append({"type": "data-subagent-chunk", "data": dump_chunk(chunk), "transient": True})
            return events, sequence
        self._start(events, chunk.agent_id)
        handler = _HANDLERS.get(type(chunk))
        if handler is None:
            self.logger.warning("skipping chunk of unknown type %r", type(chunk).__name__)
            return events, sequence
        handler(self, chunk, events)
        return events, sequence

    def _text(self, chunk: TextDelta, events: list[UIEvent]) -> None:
        self.close_reasoning(events)
        self._open_step(events)
        if self.text_block is None:
            self.text_block = self.new_block_id("text")
            events.append({"type": "text-start", "id": self.text_block})
        if chunk.delta:
            events.append({"type": "text-delta", "id": self.text_block, "delta": chunk.delta})

    def _thinking(self, chunk: Thinking, events: list[UIEvent]) -> None:
        self.close_text(events)
        self._open_step(events)
        if self.reasoning_block is None:
            if not chunk.content and chunk.is_complete:
                return
            self.reasoning_block = self.new_block_id("reasoning")
            events.append({"type": "reasoning-start", "id": self.reasoning_block})
        if chunk.content:
            events.append({"type": "reasoning-delta", "id": self.reasoning_block, "delta": chunk.content})
        if chunk.is_complete:
            self.close_reasoning(events)

    def _tool_arg_start(self, chunk: ToolArgStreamStart, events: list[UIEvent]) -> None:
        self.close_blocks(events)
        self._open_step(events)
        if chunk.tool_call_id in self.tools_known:
            return
        self.tools_started.add(chunk.tool_call_id)
        self.tools_known.add(chunk.tool_call_id)
        events.append(
            {"type": "tool-input-start", "toolCallId": chunk.tool_call_id, "toolName": chunk.tool_name, "dynamic": True}
        )

    def _tool_arg_delta(self, chunk: ToolArgStreamDelta, events: list[UIEvent]) -> None:
        if chunk.tool_call_id not in self.tools_started:
            self.logger.warning("tool argument delta for %s without a start: skipped", chunk.tool_call_id)
            return
        events.append({"type": "tool-input-delta", "toolCallId": chunk.tool_call_id, "inputTextDelta": chunk.delta})

    def _tool_arg_end(self, chunk: ToolArgStreamEnd, events: list[UIEvent]) -> None:
        self.close_blocks(events)
        self._open_step(events)
        self._tool_input(events, chunk.tool_call_id, chunk.tool_name, chunk.arguments)

    def _tool_start(self, chunk: ToolStart, events: list[UIEvent]) -> None:
        self.close_blocks(events)
        self._open_step(events)
        self._tool_input(events, chunk.tool_call_id, chunk.tool_name, chunk.arguments)

    def _tool_end(self, chunk: ToolEnd, events: list[UIEvent]) -> None:
        if chunk.tool_call_id not in self.tools_known:
            self.logger.warning("tool result for unknown call %s: skipped", chunk.tool_call_id)
            return
        self.close_blocks(events)
        if chunk.success:
            events.append(
                {
                    "type": "tool-output-available",
                    "toolCallId": chunk.tool_call_id,
                    "output": chunk.result,
                    "dynamic": True,
                }
            )
        else:
            error = chunk.error or "Tool failed"
            events.append(
                {"type": "tool-output-error", "toolCallId": chunk.tool_call_id, "errorText": error, "dynamic": True}
            )

    def _tool_input_error(self, chunk: ToolInputError, events: list[UIEvent]) -> None:
        self.close_blocks(events)
        self._open_step(events)
        self.tools_started.discard(chunk.tool_call_id)
        self.tools_known.add(chunk.tool_call_id)
        events.append(
            {
                "type": "tool-input-error",
                "toolCallId": chunk.tool_call_id,
                "toolName": chunk.tool_name,
                "input": chunk.input,
                "errorText": chunk.error,
                "dynamic": True,
            }
        )

    def _tool_output_error(self, chunk: ToolOutputError, events: list[UIEvent]) -> None:
        if chunk.tool_call_id not in self.tools_known:
            self.logger.warning("tool output error for unknown call %s: skipped", chunk.tool_call_id)
            return
        self.close_blocks(events)
        events.append(
            {"type": "tool-output-error", "toolCallId": chunk.tool_call_id, "errorText": chunk.error, "dynamic": True}
        )

    def _tool_approval_request(self, chunk: ToolApprovalRequest, events: list[UIEvent]) -> None:
        if chunk.tool_call_id not in self.tools_known:
            self.logger.warning("approval request for unknown call %s: skipped", chunk.tool_call_id)
            return
        self.close_blocks(events)
        events.append(
            {"type": "tool-approval-request", "approvalId": chunk.approval_id, "toolCallId": chunk.tool_call_id}
        )

    def _tool_output_denied(self, chunk: ToolOutputDenied, events: list[UIEvent]) -> None:
        if chunk.tool_call_id not in self.tools_known:
            self.logger.warning("denial of unknown call %s: skipped", chunk.tool_call_id)
            return
        self.close_blocks(events)
        events.append({"type": "tool-output-denied", "toolCallId": chunk.tool_call_id})

    def _data(self, name: str, data: Any, events: list[UIEvent]) -> None:
        events.append({"type": f"data-{name}", "data": data, "transient": True})

    def _subagent(self, chunk: SubAgentStart | SubAgentEnd, events: list[UIEvent]) -> None:
        name = "subagent-start" if isinstance(chunk, SubAgentStart) else "subagent-end"
        self._data(name, _payload(chunk), events)

    def _custom(self, chunk: CustomEvent, events: list[UIEvent]) -> None:
        self._data(chunk.event_name, chunk.data, events)

    def _state_patch(self, chunk: StatePatch, events: list[UIEvent]) -> None:
        self._data("state-patch", _payload(chunk)["patches"], events)

    def _output(self, chunk: OutputChunk, events: list[UIEvent]) -> None:
        self._data("output", chunk.output, events)

    def _error(self, chunk: ErrorChunk, events: list[UIEvent]) -> None:
        self.close_blocks(events)
        events.append({"type": "error", "errorText": chunk.error})

    def _control(self, chunk: Chunk, events: list[UIEvent]) -> None:
        if isinstance(chunk, StepCommitted) and self.include_step_events and self.step_open:
            self.close_blocks(events)
            events.append({"type": "finish-step"})
            self.step_open = False
        events.append({"type": CONTROL_EVENTS[type(chunk)], "data": _payload(chunk), "transient": True})

    def finalize(self, finish_reason: str | None = None) -> list[UIEvent]:
        """Close open blocks (and step) and emit ``finish``; nothing if nothing was started."""
        if self.finished or not self.started:
            self.finished = True
            return []
        self.finished = True
        events: list[UIEvent] = []
        self.close_blocks(events)
        if self.step_open:
            events.append({"type": "finish-step"})
            self.step_open = False
        finish: UIEvent = {"type": "finish"}
        if finish_reason is not None:
            finish["finishReason"] = finish_reason
        events.append(finish)
        return events


_HANDLERS: dict[type, Callable[[StreamTransformer, Any, list[UIEvent]], None]] = {
    TextDelta: StreamTransformer._text,
    Thinking: StreamTransformer._thinking,
    ToolArgStreamStart: StreamTransformer._tool_arg_start,
    ToolArgStreamDelta: StreamTransformer._tool_arg_delta,
    ToolArgStreamEnd: StreamTransformer._tool_arg_end,
    ToolStart: StreamTransformer._tool_start,
    ToolEnd: StreamTransformer._tool_end,
    ToolInputError: StreamTransformer._tool_input_error,
    ToolOutputError: StreamTransformer._tool_output_error,
    ToolApprovalRequest: StreamTransformer._tool_approval_request,
    ToolOutputDenied: StreamTransformer._tool_output_denied,
    SubAgentStart: StreamTransformer._subagent,
    SubAgentEnd: StreamTransformer._subagent,
    CustomEvent: StreamTransformer._custom,
    StatePatch: StreamTransformer._state_patch,
    OutputChunk: StreamTransformer._output,
    ErrorChunk: StreamTransformer._error,
    **{kind: StreamTransformer._control for kind in CONTROL_EVENTS},
}
