"""What a tool sees while it runs: the agent's state, events, the run's identity."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jsonpatch

from streams.exceptions import HelixError

if TYPE_CHECKING:
    from workers.runtime.loop import RunLoop

__all__ = ["StatePatchError", "ToolContext", "diff_state"]


class StatePatchError(HelixError):
    """A state patch does not apply to the current state."""

    code = "state_patch_failed"
    status_code = 500


def _resolve(document: Any, pointer: str) -> Any:
    return jsonpatch.JsonPointer(pointer).resolve(document)


def diff_state(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations turning ``before`` into ``after``, limited to add/remove/replace
    (the library's ``move`` and ``copy`` are rewritten, which every client can apply)."""
    operations: list[dict[str, Any]] = []
    for op in jsonpatch.make_patch(before, after).patch:
        kind = op["op"]
        if kind == "move":
            value = _resolve(before, op["from"])
            operations += [{"op": "remove", "path": op["from"]}, {"op": "add", "path": op["path"], "value": value}]
        elif kind == "copy":
            operations.append({"op": "add", "path": op["path"], "value": _resolve(before, op["from"])})
        else:
            operations.append(op)
    return operations


@dataclass
class ToolContext:
    """Passed to every tool: ``state`` is the agent's state (mutate it freely; the changes are
    published as a ``state_patch`` after the tool), ``emit`` sends an application event."""

    loop: RunLoop
    tool_call_id: str
    tool_name: str
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.loop.run_id

    @property
    def session_id(self) -> str:
        return self.loop.session_id

    async def emit(self, event_name: str, data: Any = None) -> None:
        """Send a ``custom`` chunk (``data-<event_name>`` on the client)."""
        await self.loop.write({"type": "custom", "eventName": event_name, "data": data})

    def apply_patch(self, operations: list[dict[str, Any]]) -> None:
        """Apply RFC 6902 ``operations`` to ``state``; raises :class:`StatePatchError` (and
        changes nothing) when they do not apply."""
        try:
            patched = jsonpatch.apply_patch(copy.deepcopy(self.state), operations)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as exc:
            raise StatePatchError(f"State patch does not apply: {exc}") from None
        self.state.clear()
        self.state.update(patched)
