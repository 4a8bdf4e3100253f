"""Loading UI messages from a state store: paginated, all at once, or in the core format."""

from __future__ import annotations

from typing import Literal

from chat.ai_sdk.messages import (
    CoreUIMessage,
    IdGenerator,
    convert_to_core_ui_messages,
    convert_to_ui_messages,
    merge_assistant_messages,
)
from chat.ai_sdk.state import StateStore
from chat.ai_sdk.ui_messages import UIMessage
from streams.exceptions import ValidationError
from streams.messages import StoredMessage

__all__ = [
    "UIMessageStore",
    "all_messages",
    "load_all_ui_messages",
    "load_core_ui_messages",
    "load_reply_page",
    "load_ui_messages",
]

MAX_LIMIT = 500
_PAGE = 500


def _check_page(offset: int, limit: int) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValidationError(f"offset must be a non-negative integer, not {offset!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValidationError(f"limit must be an integer from 1 to {MAX_LIMIT}, not {limit!r}")


async def load_ui_messages(
    store: StateStore,
    session_id: str,
    offset: int = 0,
    limit: int = 50,
    include_reasoning: bool = True,
    include_tool_results: bool = True,
    generate_id: IdGenerator | None = None,
    tool_parts: Literal["dynamic", "static"] = "dynamic",
) -> tuple[list[UIMessage], bool]:
    """One page of UI messages and whether more follow.

    A page holds ``limit`` storage messages; a tool result stored on the next page is not merged
    into its call here (use :func:`load_all_ui_messages` when that matters).
    """
    _check_page(offset, limit)
    page = await store.get_messages(session_id, offset, limit)
    messages = convert_to_ui_messages(
        page.messages,
        generate_id,
        include_reasoning,
        include_tool_results,
        tool_parts=tool_parts,
        first_index=offset,
        decisions=await store.get_tool_decisions(session_id),
    )
    return messages, page.has_more


async def all_messages(store: StateStore, session_id: str) -> list[StoredMessage]:
    """Every stored message of the session, read page by page."""
    messages: list[StoredMessage] = []
    while True:
        page = await store.get_messages(session_id, len(messages), _PAGE)
        messages.extend(page.messages)
        if not page.has_more or not page.messages:
            return messages


async def load_all_ui_messages(
    store: StateStore,
    session_id: str,
    include_reasoning: bool = True,
    include_tool_results: bool = True,
    generate_id: IdGenerator | None = None,
    tool_parts: Literal["dynamic", "static"] = "dynamic",
) -> list[UIMessage]:
    """Every UI message of the session; tool results are always merged into their calls."""
    messages = await all_messages(store, session_id)
    decisions = await store.get_tool_decisions(session_id)
    return convert_to_ui_messages(
        messages, generate_id, include_reasoning, include_tool_results, tool_parts=tool_parts, decisions=decisions
    )


async def load_reply_page(
    store: StateStore,
    session_id: str,
    offset: int = 0,
    limit: int = 50,
    include_reasoning: bool = True,
    include_tool_results: bool = True,
    generate_id: IdGenerator | None = None,
) -> tuple[list[UIMessage], bool, int]:
    """A page of the session as a client shows it: one message per reply, the steps of a reply
    merged as the snapshot merges them, so every message has its own id. ``offset`` and ``limit``
    count these messages; returns the page, whether more follow, and how many there are."""
    _check_page(offset, limit)
    merged = merge_assistant_messages(
        await load_all_ui_messages(store, session_id, include_reasoning, include_tool_results, generate_id)
    )
    return merged[offset : offset + limit], offset + limit < len(merged), len(merged)


async def load_core_ui_messages(
    store: StateStore,
    session_id: str,
    include_reasoning: bool = True,
    include_tool_results: bool = True,
    generate_id: IdGenerator | None = None,
) -> list[CoreUIMessage]:
    """Every message of the session in the core format."""
    messages = await all_messages(store, session_id)
    return convert_to_core_ui_messages(messages, generate_id, include_reasoning, include_tool_results)


class UIMessageStore:
    """A state store seen as UI messages, for code that loads them repeatedly."""

    def __init__(
        self,
        store: StateStore,
        *,
        include_reasoning: bool = True,
        include_tool_results: bool = True,
        generate_id: IdGenerator | None = None,
    ) -> None:
        self.store = store
        self.include_reasoning = include_reasoning
        self.include_tool_results = include_tool_results
        self.generate_id = generate_id

    async def get_ui_messages(self, session_id: str, offset: int = 0, limit: int = 50) -> tuple[list[UIMessage], bool]:
        return await load_ui_messages(
            self.store, session_id, offset, limit, self.include_reasoning, self.include_tool_results, self.generate_id
        )

    async def get_all_ui_messages(self, session_id: str) -> list[UIMessage]:
        return await load_all_ui_messages(
            self.store, session_id, self.include_reasoning, self.include_tool_results, self.generate_id
        )

    async def get_core_ui_messages(self, session_id: str) -> list[CoreUIMessage]:
        return await load_core_ui_messages(
            self.store, session_id, self.include_reasoning, self.include_tool_results, self.generate_id
        )
