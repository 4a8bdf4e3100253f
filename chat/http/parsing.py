"""Reading a chat POST body: the seeds' shape and the one ``DefaultChatTransport`` sends.

Seeds: ``{"message": "...", "sessionId"?, "messages"?: [storage messages], "state"?: {...}}``.
AI SDK: ``{"id", "messages": [UIMessage, ...], "trigger", "messageId"?, "agent"?}``; the new user
message is the last message's text, a last assistant message makes it a continuation (the reply
reuses that message's id), ``regenerate-message`` answers the last user message again.

Only the last UI message is read: the history is the server's. The seeds' ``messages`` and
``state`` overrides are parsed here (``system`` messages dropped, as the seeds do: the agent adds
its own) and refused by the handler unless its caller is trusted with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from chat.state.approvals import ToolAnswer
from streams.exceptions import ValidationError
from streams.messages import StoredMessage

__all__ = ["MAX_DEPTH", "ChatInput", "Limits", "ToolAnswer", "decode_json_body", "parse_chat_body", "tool_answers"]


#: How deep a request body may nest objects and lists (a state deeper than this cannot be stored).
MAX_DEPTH = 32


def decode_json_body(raw: bytes) -> Any:
    """The JSON value of a request body, or a ``ValidationError`` saying what is wrong with it:
    not JSON, a non-finite or out-of-range number, an unpaired UTF-16 surrogate, or nesting
    deeper than :data:`MAX_DEPTH`. Nothing that fails here can reach a store."""
    try:
        value = msgspec.json.decode(raw or b"null")
    except RecursionError:
        raise ValidationError(f"The body nests deeper than {MAX_DEPTH} levels") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValidationError(
            f"The body is not valid JSON ({exc}); NaN, Infinity, numbers beyond a double and unpaired "
            "surrogates (\\ud800) are refused"
        ) from None
    _check_depth(value)
    return value


def _check_depth(value: Any) -> None:
    level, depth = [value], 0
    while level:
        depth += any(isinstance(node, (dict, list)) for node in level)
        if depth > MAX_DEPTH:
            raise ValidationError(f"The body nests deeper than {MAX_DEPTH} levels")
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node if isinstance(node, list) else ())
            if isinstance(child, (dict, list))
        ]


@dataclass(frozen=True)
class Limits:
    max_message_chars: int = 20_000
    max_messages: int = 500


@dataclass(frozen=True)
class ChatInput:
    """What a POST asks for."""

    agent: str | None
    text: str | None  # the new user message; None for a continuation or a regeneration
    user_message_id: str | None = None
    continuation_of: str | None = None  # the assistant message id a continuation reuses
    regenerate: bool = False
    messages: list[StoredMessage] | None = None  # seeds' override of the history
    state: dict[str, Any] | None = None  # seeds' override of the state
    answers: list[ToolAnswer] = field(default_factory=list)  # a continuation's tool results and decisions

    @property
    def overrides(self) -> list[str]:
        """The fields that replace what the server stored: ``messages``, ``state``."""
        return [name for name in ("messages", "state") if getattr(self, name) is not None]


_ANSWERED = ("approval-responded", "output-denied", "output-available", "output-error")


def tool_answers(message: dict[str, Any]) -> list[ToolAnswer]:
    """The answered tool parts of a UI message (``addToolApprovalResponse``, ``addToolOutput``)."""
    answers = []
    for part in message.get("parts") or []:
        if not isinstance(part, dict) or not str(part.get("type", "")).startswith(("tool-", "dynamic-tool")):
            continue
        call_id, state, approval = part.get("toolCallId"), part.get("state"), part.get("approval")
        if not isinstance(call_id, str) or state not in _ANSWERED:
            continue
        if isinstance(approval, dict) and isinstance(approval.get("approved"), bool):
            reason = approval.get("reason")
            answers.append(
                ToolAnswer(
                    call_id,
                    approval_id=str(approval.get("id", "")),
                    approved=approval["approved"],
                    reason=reason if isinstance(reason, str) else "",
                    state=state,
                )
            )
        elif state == "output-available":
            answers.append(ToolAnswer(call_id, output=part.get("output"), state=state))
        elif state == "output-error":
            answers.append(ToolAnswer(call_id, error=str(part.get("errorText") or "The tool failed"), state=state))
    return answers


def _text_of(message: dict[str, Any]) -> str:
    parts = message.get("parts")
    if isinstance(parts, list):
        return "".join(p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text")
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _check_text(text: str, limits: Limits, field: str) -> str:
    if not text.strip():
        raise ValidationError(f"{field} must not be empty")
    if len(text) > limits.max_message_chars:
        raise ValidationError(f"{field} is longer than {limits.max_message_chars} characters")
    return text


def parse_chat_body(body: Any, limits: Limits) -> ChatInput:
    """Validate a chat POST body; raises ``ValidationError`` naming what is wrong."""
    if not isinstance(body, dict):
        raise ValidationError("The request body must be a JSON object")
    agent = body.get("agent")
    if agent is not None and (not isinstance(agent, str) or not agent):
        raise ValidationError("agent must be the name of a registered agent")
    if "message" in body:  # the seeds' shape
        message = body["message"]
        if not isinstance(message, str):
            raise ValidationError("message must be a string")
        history = body.get("messages")
        stored = None
        if history is not None:
            if not isinstance(history, list) or len(history) > limits.max_messages:
                raise ValidationError(f"messages must be a list of at most {limits.max_messages} messages")
            try:
                stored = [msgspec.convert(item, StoredMessage) for item in history]
            except msgspec.ValidationError as exc:
                raise ValidationError(f"Invalid message in messages: {exc}") from None
            stored = [m for m in stored if m.role != "system"]
        return ChatInput(agent, _check_text(message, limits, "message"), messages=stored, state=_state_of(body))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValidationError("messages must be a non-empty list of UI messages (or send message)")
    if len(messages) > limits.max_messages:
        raise ValidationError(f"messages holds more than {limits.max_messages} messages")
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") not in ("user", "assistant"):
        raise ValidationError("the last message must be the user's new message or the assistant message it continues")
    trigger = body.get("trigger", "submit-message")
    if trigger not in ("submit-message", "regenerate-message"):
        raise ValidationError(f"Unknown trigger {trigger!r}")
    if last["role"] == "assistant":
        message_id = last.get("id")
        if not isinstance(message_id, str) or not message_id:
            raise ValidationError("the assistant message to continue has no id")
        return ChatInput(agent, None, continuation_of=message_id, answers=tool_answers(last), state=_state_of(body))
    text = _check_text(_text_of(last), limits, "the last user message")
    message_id = last.get("id") if isinstance(last.get("id"), str) else None
    regenerate = trigger == "regenerate-message"
    return ChatInput(agent, text, user_message_id=message_id, regenerate=regenerate, state=_state_of(body))


def _state_of(body: dict[str, Any]) -> dict[str, Any] | None:
    state = body.get("state")
    if state is not None and not isinstance(state, dict):
        raise ValidationError("state must be an object")
    return state
