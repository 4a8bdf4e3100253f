"""Stored messages and in-flight content → AI SDK v6 UI messages (and the framework-agnostic
core format).

Rules: system and user messages become one text part; an assistant message becomes a
reasoning part, a text part and one tool part per call, in that order; ``tool`` messages are
merged into the matching tool part and never appear on their own; results without a matching
call are dropped; a result that is not JSON is kept as the raw string. Text and reasoning parts
are ``state: "done"``, as the client leaves them once a block ends.

What the server recorded about paused calls (``decisions``) decides how their parts read, as the
client showed them live: a call waiting on a person is ``approval-requested`` with its approval
id, a decided one ``approval-responded`` until the run applies it, a denied (or expired) one
``output-denied``, and an approved one carries ``approval.approved``. A run still in flight is shown
as one ``-partial`` assistant message built from its partial content (:func:`partial_message`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import msgspec

from chat.ai_sdk.partial import PartialContent, TextSegment, ToolSegment
from chat.ai_sdk.state import ToolDecision
from chat.ai_sdk.ui_messages import (
    DynamicToolUIPart,
    PartState,
    ReasoningUIPart,
    TextUIPart,
    ToolApproval,
    ToolState,
    ToolUIPart,
    UIMessage,
    UIMessagePart,
    UIRole,
)
from streams.messages import StoredMessage, ToolCall

__all__ = [
    "PARTIAL_SUFFIX",
    "CoreUIMessage",
    "ToolInvocationPart",
    "convert_to_core_ui_messages",
    "convert_to_ui_messages",
    "merge_assistant_messages",
    "partial_message",
]

IdGenerator = Callable[[int, StoredMessage], str]
PARTIAL_SUFFIX = "-partial"
Outcome = Literal["pending", "completed", "error"]
Decisions = Mapping[str, ToolDecision]


class ToolInvocationPart(msgspec.Struct, tag_field="type", tag="tool-invocation", kw_only=True, rename="camel"):
    """A tool call in the core format (Helix's own, no AI SDK type): ``error`` holds the message."""

    tool_call_id: str
    tool_name: str
    input: Any
    state: Outcome
    output: Any = msgspec.UNSET
    error: str | msgspec.UnsetType = msgspec.UNSET


class CoreUIMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A message in the core format: text and reasoning parts carry no state."""

    id: str
    role: UIRole
    parts: list[TextUIPart | ReasoningUIPart | ToolInvocationPart]
    metadata: Any = None


def _default_id(index: int, message: StoredMessage) -> str:
    return f"msg-{index}"


def _parse_result(content: str) -> Any:
    try:
        return json.loads(content)
    except (TypeError, ValueError):
        return content  # malformed JSON: keep the raw string


def _results(messages: Sequence[StoredMessage]) -> dict[str, StoredMessage]:
    results: dict[str, StoredMessage] = {}
    for message in messages:
        if message.role == "tool" and message.tool_call_id and message.tool_call_id not in results:
            results[message.tool_call_id] = message
    return results


def _outcome(result: StoredMessage | None) -> tuple[Outcome | Literal["denied"], Any]:
    """Where a call stands, with its output or error message."""
    if result is None:
        return "pending", None
    if result.metadata.get("denied"):
        return "denied", result.content
    error = result.metadata.get("error")
    if error is None or error is False:
        return "completed", _parse_result(result.content)
    return "error", error if isinstance(error, str) else (result.content or "Tool failed")


_UI_STATES: dict[str, ToolState] = {
    "pending": "input-available",
    "completed": "output-available",
    "error": "output-error",
    "denied": "output-denied",
}


def _approval(decision: ToolDecision | None, outcome: str) -> tuple[ToolState | None, ToolApproval | None]:
    """The state a recorded decision puts a part in (``None``: the outcome's) and its approval."""
    if decision is None or decision.kind != "approval":
        return None, None
    reason = decision.reason or None
    if decision.status == "pending":
        return ("approval-requested" if outcome == "pending" else None), ToolApproval(id=decision.approval_id)
    approved = decision.status == "approved"
    state: ToolState | None = "approval-responded" if outcome == "pending" else None
    if not approved and outcome != "pending":
        state = "output-denied"
    return state, ToolApproval(id=decision.approval_id, approved=approved, reason=reason)


def _tool_part(
    call: ToolCall, result: StoredMessage | None, style: Literal["dynamic", "static"], decision: ToolDecision | None
) -> UIMessagePart:
    outcome, value = _outcome(result)
    decided_state, approval = _approval(decision, outcome)
    state = decided_state or _UI_STATES[outcome]
    part: DynamicToolUIPart | ToolUIPart
    if style == "dynamic":
        part = DynamicToolUIPart(call.name, tool_call_id=call.id, state=state, input=call.arguments)
    else:
        part = ToolUIPart(f"tool-{call.name}", tool_call_id=call.id, state=state, input=call.arguments)
    if state == "output-available":
        part.output = value
    elif state == "output-error":
        part.error_text = value
    elif state == "output-denied" and approval is None:
        approval = ToolApproval(id="", approved=False)
    if approval is not None:
        part.approval = approval
    return part


def _core_tool_part(call: ToolCall, result: StoredMessage | None, decision: ToolDecision | None) -> ToolInvocationPart:
    outcome, value = _outcome(result)
    state: Outcome = "error" if outcome == "denied" else outcome
    part = ToolInvocationPart(tool_call_id=call.id, tool_name=call.name, input=call.arguments, state=state)
    if state == "completed":
        part.output = value
    elif state == "error":
        part.error = value
    return part


_Fields = tuple[str, UIRole, list[Any], dict[str, Any] | None]


def _convert(
    messages: Sequence[StoredMessage],
    generate_id: IdGenerator | None,
    include_reasoning: bool,
    include_tool_results: bool,
    tool_part: Callable[[ToolCall, StoredMessage | None, ToolDecision | None], Any],
    done: PartState | None,
    first_index: int,
    decisions: Decisions | None,
) -> Iterator[_Fields]:
    """The id, role, parts and metadata of each converted message."""
    make_id = generate_id or _default_id
    results = _results(messages) if include_tool_results else {}
    for index, message in enumerate(messages, start=first_index):
        role = message.role
        if role == "tool":
            continue
        parts: list[Any]
        if role != "assistant":
            parts = [TextUIPart(text=message.content)]
        else:
            parts = []
            if include_reasoning and message.reasoning:
                parts.append(ReasoningUIPart(text=message.reasoning, state=done))
            if message.content:
                parts.append(TextUIPart(text=message.content, state=done))
            decided = decisions or {}
            parts += [tool_part(call, results.get(call.id), decided.get(call.id)) for call in message.tool_calls]
        metadata = dict(message.metadata) if message.metadata else None
        yield message.id or make_id(index, message), role, parts, metadata


def convert_to_ui_messages(
    messages: Sequence[StoredMessage],
    generate_id: IdGenerator | None = None,
    include_reasoning: bool = True,
    include_tool_results: bool = True,
    *,
    tool_parts: Literal["dynamic", "static"] = "dynamic",
    first_index: int = 0,
    decisions: Decisions | None = None,
) -> list[UIMessage]:
    """AI SDK v6 UIMessages: tools as ``dynamic-tool`` parts (``tool_parts="static"``: as
    ``tool-{name}`` parts). Ids: the message's own, else ``generate_id(index, message)`` (default
    ``msg-{index}``, the index counted from ``first_index``). ``decisions``: the session's
    recorded tool decisions (:meth:`~chat.ai_sdk.state.StateStore.get_tool_decisions`)."""

    def tool_part(call: ToolCall, result: StoredMessage | None, decision: ToolDecision | None) -> UIMessagePart:
        return _tool_part(call, result, tool_parts, decision)

    converted = _convert(
        messages, generate_id, include_reasoning, include_tool_results, tool_part, "done", first_index, decisions
    )
    return [UIMessage(id=id, role=role, parts=parts, metadata=metadata) for id, role, parts, metadata in converted]


def convert_to_core_ui_messages(
    messages: Sequence[StoredMessage],
    generate_id: IdGenerator | None = None,
    include_reasoning: bool = True,
    include_tool_results: bool = True,
    *,
    first_index: int = 0,
) -> list[CoreUIMessage]:
    """The framework-agnostic core format: ``tool-invocation`` parts whose ``state`` is
    ``pending``, ``completed`` or ``error`` (``executing`` exists only live), errors in ``error``."""
    converted = _convert(
        messages, generate_id, include_reasoning, include_tool_results, _core_tool_part, None, first_index, None
    )
    return [CoreUIMessage(id=id, role=role, parts=parts, metadata=metadata) for id, role, parts, metadata in converted]


_PARTIAL_STATES: dict[str, ToolState] = {
    "streaming": "input-streaming",
    "pending": "input-available",
    "executing": "input-available",
    "approval": "approval-requested",
    "completed": "output-available",
    "error": "output-error",
    "denied": "output-denied",
}


def _partial_tool_part(tool: ToolSegment) -> DynamicToolUIPart:
    part = DynamicToolUIPart(tool.tool_name, tool_call_id=tool.tool_call_id, state=_PARTIAL_STATES[tool.state])
    part.input = None if tool.state == "streaming" else tool.input
    if tool.state == "completed":
        part.output = tool.output
    elif tool.state == "error":
        part.error_text = tool.error or "Tool failed"
    elif tool.state == "approval":
        part.approval = ToolApproval(id=tool.approval_id or "")
    return part


def partial_message(content: PartialContent, message_id: str, *, unfinished_tools: bool = True) -> UIMessage:
    """The UI message a snapshot shows for in-flight content when it is not replayed.

    With ``unfinished_tools=False`` it stops before the first call still in flight: a stream
    resumed without replay re-announces the calls from there
    (:func:`~chat.ai_sdk.replay.unfinished_tool_events`), so each shows once and in order.
    """
    segments = content.segments if unfinished_tools else content.segments[: content.first_unfinished()]
    parts: list[UIMessagePart] = []
    for segment in segments:
        if isinstance(segment, ToolSegment):
            parts.append(_partial_tool_part(segment))
        elif segment.text:
            state: PartState = "streaming" if segment.open else "done"
            kind = TextUIPart if isinstance(segment, TextSegment) else ReasoningUIPart
            parts.append(kind(text=segment.text, state=state))
    return UIMessage(id=message_id, role="assistant", parts=parts)


def merge_assistant_messages(
    messages: Sequence[UIMessage], deduplicate_tools: bool = True, filter_empty_text: bool = True
) -> list[UIMessage]:
    """Merge runs of consecutive assistant messages into one (what a client shows as one reply).

    Parts are concatenated in order; with ``deduplicate_tools`` the first part of each
    ``toolCallId`` is kept; with ``filter_empty_text`` empty text parts are dropped. The merged
    message has the first message's id and metadata; if a merged message was a partial one (id
    ending in ``-partial``), the merged id keeps that suffix. The messages given are not changed.
    """
    merged: list[UIMessage] = []
    for message in messages:
        previous = merged[-1] if merged else None
        if previous is not None and previous.role == "assistant" and message.role == "assistant":
            previous.parts.extend(message.parts)
            if message.id.endswith(PARTIAL_SUFFIX) and not previous.id.endswith(PARTIAL_SUFFIX):
                previous.id += PARTIAL_SUFFIX
            continue
        merged.append(msgspec.structs.replace(message, parts=list(message.parts)))
    for message in merged:
        if message.role == "assistant":
            message.parts = _clean_parts(message.parts, deduplicate_tools, filter_empty_text)
    return merged


def _clean_parts(parts: list[UIMessagePart], deduplicate_tools: bool, filter_empty_text: bool) -> list[UIMessagePart]:
    seen: set[str] = set()
    kept: list[UIMessagePart] = []
    for part in parts:
        if filter_empty_text and isinstance(part, TextUIPart) and not part.text:
            continue
        if deduplicate_tools and isinstance(part, (DynamicToolUIPart, ToolUIPart)):
            if part.tool_call_id in seen:
                continue
            seen.add(part.tool_call_id)
        kept.append(part)
    return kept
