"""The storage message format: what a run persists after each step, and what snapshots and UI
messages are built from.

One message per role turn, LLM-context shaped: ``user`` / ``system`` messages carry ``content``;
an ``assistant`` message carries the step's ``content`` (text), ``reasoning`` and ``tool_calls``;
a ``tool`` message carries one call's result in ``content`` (JSON text) with ``tool_call_id``.
A failed tool result has ``metadata["error"]`` set to its message. ``id`` is the message's stable
id: for assistant messages, the id of the UI message (the response) the step belongs to, so
every assistant message of one response shares it.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = ["Role", "StoredMessage", "ToolCall"]

Role = Literal["user", "assistant", "system", "tool"]


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """A tool call of an assistant message: ``arguments`` is the parsed input, or the raw text
    when the model's arguments were not JSON."""

    id: str
    name: str
    arguments: Any = None


class StoredMessage(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """One persisted message."""

    role: Role
    content: str = ""
    id: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None
    metadata: dict[str, Any] = {}
