"""Storage messages → AI SDK v6 UIMessages (and the framework-agnostic core format).

Rules: system and user messages become one text part; an assistant message becomes a
reasoning part, a text part and one tool part per call, in that order; ``tool`` messages are
merged into the matching tool part and never appear on their own; results without a matching
call are dropped; a result that is not JSON is kept as the raw string. Text and reasoning parts
are ``state: "done"``, as the client leaves them once a block ends.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from streams.messages import StoredMessage, ToolCall

__all__ = [
    "PARTIAL_SUFFIX",
    "UIMessage",
    "convert_to_core_ui_messages",
    "convert_to_ui_messages",
    "merge_assistant_messages",
]

UIMessage = dict[str, Any]
IdGenerator = Callable[[int, StoredMessage], str]
PARTIAL_SUFFIX = "-partial"


def _default_id(index: int, message: StoredMessage) -> str:
    return f"msg-{index}"


def _parse_result(content: str) -> Any:
    try:
        return json.loads(content)
    except (TypeError, ValueError):
        return content  # malformed JSON: keep the raw string


def _results(messages: Iterable[StoredMessage]) -> dict[str, StoredMessage]:
    results: dict[str, StoredMessage] = {}
    for message in messages:
        if message.role == "tool" and message.tool_call_id and message.tool_call_id not in results:
            results[message.tool_call_id] = message
    return results


def _tool_error(result: StoredMessage) -> str | None:
    error = result.metadata.get("error")
    if error is None or error is False:
        return None
    return error if isinstance(error, str) else (result.content or "Tool failed")


def _tool_part(call: ToolCall, result: StoredMessage | None, style: Literal["dynamic", "static"]) -> dict[str, Any]:
    if style == "dynamic":
        part: dict[str, Any] = {"type": "dynamic-tool", "toolName": call.name, "toolCallId": call.id}
    else:
        part = {"type": f"tool-{call.name}", "toolCallId": call.id}
    part["input"] = call.arguments
    if result is None:
        part["state"] = "input-available"
    elif (error := _tool_error(result)) is not None:
        part["state"] = "output-error"
        part["errorText"] = error
    else:
        part["state"] = "output-available"
        part["output"] = _parse_result(result.content)
    return part


def _core_tool_part(call: ToolCall, result: StoredMessage | None) -> dict[str, Any]:
    part: dict[str, Any] = {
        "type": "tool-invocation",
        "toolCallId": call.id,
        "toolName": call.name,
        "input": call.arguments,
    }
    if result is None:
        part["state"] = "pending"
    elif (error := _tool_error(result)) is not None:
        part["state"] = "error"
        part["error"] = error
    else:
        part["state"] = "completed"
        part["output"] = _parse_result(result.content)
    return part


def _convert(
    messages: Sequence[StoredMessage],
    generate_id: IdGenerator | None,
    include_reasoning: bool,
    include_tool_results: bool,
    tool_part: Callable[[ToolCall, StoredMessage | None], dict[str, Any]],
    done: dict[str, str],
    first_index: int,
) -> list[UIMessage]:
    make_id = generate_id or _default_id
    results = _results(messages) if include_tool_results else {}
    converted: list[UIMessage] = []
    for index, message in enumerate(messages, start=first_index):
        if message.role == "tool":
            continue
        parts: list[dict[str, Any]]
        if message.role != "assistant":
            parts = [{"type": "text", "text": message.content}]
        else:
            parts = []
            if include_reasoning and message.reasoning:
                parts.append({"type": "reasoning", "text": message.reasoning, **done})
            if message.content:
                parts.append({"type": "text", "text": message.content, **done})
            parts += [tool_part(call, results.get(call.id)) for call in message.tool_calls]
        ui: UIMessage = {"id": message.id or make_id(index, message), "role": message.role, "parts": parts}
        if message.metadata:
            ui["metadata"] = dict(message.metadata)
        converted.append(ui)
    return converted


def convert_to_ui_messages(
    messages: Sequence[StoredMessage],
    generate_id: IdGenerator | None = None,
    include_reasoning: bool = True,
    include_tool_results: bool = True,
    *,
    tool_parts: Literal["dynamic", "static"] = "dynamic",
    first_index: int = 0,
) -> list[UIMessage]:
    """AI SDK v6 UIMessages: tools as ``dynamic-tool`` parts (``tool_parts="static"``: as
    ``tool-{name}`` parts). Ids: the message's own, else ``generate_id(index, message)`` (default
    ``msg-{index}``, the index counted from ``first_index``)."""

    def tool_part(call: ToolCall, result: StoredMessage | None) -> dict[str, Any]:
        return _tool_part(call, result, tool_parts)

    return _convert(
        messages, generate_id, include_reasoning, include_tool_results, tool_part, {"state": "done"}, first_index
    )


def convert_to_core_ui_messages(
    messages: Sequence[StoredMessage],
    generate_id: IdGenerator | None = None,
    include_reasoning: bool = True,
    include_tool_results: bool = True,
    *,
    first_index: int = 0,
) -> list[UIMessage]:
    """The framework-agnostic core format: ``tool-invocation`` parts whose ``state`` is
    ``pending``, ``completed`` or ``error`` (``executing`` exists only live), errors in ``error``."""
    return _convert(messages, generate_id, include_reasoning, include_tool_results, _core_tool_part, {}, first_index)


def merge_assistant_messages(
    messages: Sequence[UIMessage], deduplicate_tools: bool = True, filter_empty_text: bool = True
) -> list[UIMessage]:
    """Merge runs of consecutive assistant messages into one (what a client shows as one reply).

    Parts are concatenated in order; with ``deduplicate_tools`` the first part of each
    ``toolCallId`` is kept; with ``filter_empty_text`` empty text parts are dropped. The merged
    message has the first message's id and metadata; if a merged message was a partial one (id
    ending in ``-partial``), the merged id keeps that suffix.
    """
    merged: list[UIMessage] = []
    for message in messages:
        previous = merged[-1] if merged else None
        if previous is not None and previous["role"] == "assistant" and message["role"] == "assistant":
            previous["parts"].extend(message["parts"])
            if str(message["id"]).endswith(PARTIAL_SUFFIX) and not str(previous["id"]).endswith(PARTIAL_SUFFIX):
                previous["id"] = f"{previous['id']}{PARTIAL_SUFFIX}"
            continue
        copy = dict(message)
        copy["parts"] = list(message["parts"])
        merged.append(copy)
    for message in merged:
        if message["role"] == "assistant":
            message["parts"] = _clean_parts(message["parts"], deduplicate_tools, filter_empty_text)
    return merged


def _clean_parts(parts: list[dict[str, Any]], deduplicate_tools: bool, filter_empty_text: bool) -> list[dict[str, Any]]:
    seen: set[str] = set()
    kept: list[dict[str, Any]] = []
    for part in parts:
        if filter_empty_text and part.get("type") == "text" and not part.get("text"):
            continue
        call_id = part.get("toolCallId")
        if deduplicate_tools and call_id is not None:
            if call_id in seen:
                continue
            seen.add(call_id)
        kept.append(part)
    return kept
