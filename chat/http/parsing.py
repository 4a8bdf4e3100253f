"""Reading a chat POST body: the seeds' shape and the one ``DefaultChatTransport`` sends.

Seeds: ``{"message": "...", "sessionId"?, "messages"?: [storage messages], "state"?: {...}}``.
AI SDK: ``{"id", "messages": [UIMessage, ...], "trigger", "messageId"?, "agent"?}``; the new user
message is the last message's text, a last assistant message makes it a continuation (the reply
reuses that message's id), ``regenerate-message`` answers the last user message again.

Only the last UI message is read: the history is the server's. The seeds' ``messages`` and
``state`` overrides are parsed here (``system`` messages dropped, as the seeds do: the agent adds
its own) and refused by the handler unless its caller is trusted with them.

What is read must fit the columns that will keep it, on every database: a NUL character, which
PostgreSQL's text and jsonb columns cannot hold, is refused in every string that is stored, and
the ids a client gives (messages, tool calls, approvals) and an agent's name are refused past
:data:`MAX_ID_LENGTH` characters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from chat.state.approvals import ToolAnswer
from streams.exceptions import ValidationError
from streams.messages import StoredMessage

__all__ = [
    "MAX_DEPTH",
    "MAX_ID_LENGTH",
    "ChatInput",
    "Limits",
    "ToolAnswer",
    "decode_json_body",
    "parse_chat_body",
    "tool_answers",
]


#: How deep a request body may nest objects and lists (a state deeper than this cannot be stored).
MAX_DEPTH = 32

#: The longest id a client may give a message, a tool call or an approval, and the longest agent
#: name: the width of the columns that keep them (:mod:`chat.models`).
MAX_ID_LENGTH = 100


def decode_json_body(raw: bytes) -> Any:
    """The JSON value of a request body, or a ``ValidationError`` saying what is wrong with it:
    not UTF-8, not JSON, a non-finite or out-of-range number, an unpaired UTF-16 surrogate, or
    nesting deeper than :data:`MAX_DEPTH`. Nothing that fails here can reach a store."""
    try:
        value = msgspec.json.decode(raw or b"null")
    except RecursionError:
        raise ValidationError(f"The body nests deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError as exc:  # a string's bytes (msgspec checks them as it copies them)
        raise ValidationError(
            f"The body is not valid UTF-8 ({exc.reason}: byte 0x{exc.object[exc.start]:02x} in a string)"
        ) from None
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
    _refuse_nul(text, field)
    return text


def _check_id(value: str, field: str) -> str:
    if len(value) > MAX_ID_LENGTH:
        raise ValidationError(f"{field} is longer than {MAX_ID_LENGTH} characters")
    _refuse_nul(value, field)
    return value


def _refuse_nul(value: Any, field: str) -> None:
    """Refuse ``value`` when a string in it (a key too) holds a NUL character: PostgreSQL's text
    and jsonb columns cannot store one."""
    pending = [value]
    while pending:
        node = pending.pop()
        if isinstance(node, str):
            if "\x00" in node:
                raise ValidationError(f"{field} holds a NUL character (\\u0000), which cannot be stored")
        elif isinstance(node, dict):
            pending.extend(node)
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)


def _check_answers(answers: list[ToolAnswer]) -> list[ToolAnswer]:
    for answer in answers:
        call = "tool call " + repr(_check_id(answer.tool_call_id, "a tool part's toolCallId"))
        if answer.approval_id is not None:
            _check_id(answer.approval_id, f"the approval id of {call}")
        _refuse_nul(answer.reason, f"the reason of {call}")
        _refuse_nul(answer.output, f"the output of {call}")
        _refuse_nul(answer.error, f"the errorText of {call}")
    return answers


def parse_chat_body(body: Any, limits: Limits) -> ChatInput:
    """Validate a chat POST body; raises ``ValidationError`` naming what is wrong."""
    if not isinstance(body, dict):
        raise ValidationError("The request body must be a JSON object")
    agent = body.get("agent")
    if agent is not None and (not isinstance(agent, str) or not 0 < len(agent) <= MAX_ID_LENGTH or "\x00" in agent):
        raise ValidationError(f"agent must be the name of a registered agent (at most {MAX_ID_LENGTH} characters)")
    if "message" in body:  # the seeds' shape
        message = body["message"]
        if not isinstance(message, str):
            raise ValidationError("message must be a string")
        history = body.get("messages")
        stored = None
        if history is not None:
            if not isinstance(history, list) or len(history) > limits.max_messages:
                raise ValidationError(f"messages must be a list of at most {limits.max_messages} messages")
            _refuse_nul(history, "messages")
            try:
                stored = [msgspec.convert(item, StoredMessage) for item in history]
            except msgspec.ValidationError as exc:
                raise ValidationError(f"Invalid message in messages: {exc}") from None
            stored = [m for m in stored if m.role != "system"]
            for kept in stored:
                _check_id(kept.id or "", "messages: an id")
                _check_id(kept.tool_call_id or "", "messages: a toolCallId")
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
        _check_id(message_id, "the assistant message's id")
        answers = _check_answers(tool_answers(last))
        return ChatInput(agent, None, continuation_of=message_id, answers=answers, state=_state_of(body))
    text = _check_text(_text_of(last), limits, "the last user message")
    message_id = last.get("id") if isinstance(last.get("id"), str) else None
    if message_id is not None:
        _check_id(message_id, "the last user message's id")
    regenerate = trigger == "regenerate-message"
    return ChatInput(agent, text, user_message_id=message_id, regenerate=regenerate, state=_state_of(body))


def _state_of(body: dict[str, Any]) -> dict[str, Any] | None:
    state = body.get("state")
    if state is not None and not isinstance(state, dict):
        raise ValidationError("state must be an object")
    _refuse_nul(state, "state")
    return state
