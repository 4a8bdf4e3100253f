"""What a tool sees while it runs: the agent's state, events, the run's identity."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streams.protocol import CustomEvent
from workers.runtime.state import patch_state
from workers.runtime.writer import RunWriter

__all__ = ["ToolContext"]


@dataclass
class ToolContext:
    """Passed to every tool: ``state`` is the agent's state (mutate it freely; the changes are
    published as a ``state_patch`` after the tool), ``emit`` sends an application event."""

    run_id: str
    session_id: str
    tool_call_id: str
    tool_name: str
    state: dict[str, Any]
    writer: RunWriter = field(repr=False)

    async def emit(self, event_name: str, data: Any = None) -> None:
        """Send a ``custom`` chunk (``data-<event_name>`` on the client)."""
        await self.writer.emit(CustomEvent, event_name=event_name, data=data)

    def apply_patch(self, operations: list[dict[str, Any]]) -> None:
        """Apply RFC 6902 ``operations`` to ``state``; raises :class:`~workers.exceptions.StatePatchError`
        (and changes nothing) when they do not apply."""
        patched = patch_state(self.state, operations)
        self.state.clear()
        self.state.update(patched)
