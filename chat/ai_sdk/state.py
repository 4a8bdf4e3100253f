"""The state-store interface the loaders and snapshots read, and an in-memory implementation.

The Django models implement the same interface; loaders never need more than this.
"""

from __future__ import annotations

import abc
import copy
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from streams.messages import StoredMessage

__all__ = [
    "CheckpointInfo",
    "InMemoryStateStore",
    "MessagePage",
    "RunInfo",
    "RunStatus",
    "StateStore",
    "ToolDecision",
]

RunStatus = Literal["queued", "running", "paused", "completed", "failed", "interrupted"]
ACTIVE_RUN_STATUSES: frozenset[str] = frozenset({"queued", "running", "paused"})


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The current run of a session, as far as the bridge needs it.

    ``start_sequence``: the stream's latest sequence when the run started (its chunks come after
    it). ``step_count``: steps committed so far. ``message_id``: the UI message id of the run's
    response. ``message_offset``: how many session messages precede the run's own output (the
    run's assistant and tool messages are the ones from that index on).
    """

    run_id: str
    status: RunStatus
    start_sequence: int
    step_count: int = 0
    message_id: str | None = None
    message_offset: int = 0

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_RUN_STATUSES


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """A checkpoint of a session's run: after ``step``, ``message_count`` messages were stored and
    the stream stood at ``stream_sequence``; ``state`` is the agent state then (when read)."""

    checkpoint_id: str
    step: int
    message_count: int
    stream_sequence: int
    state: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """What the server recorded about a tool call a run paused on.

    ``kind``: ``approval`` (a person decides whether it runs) or ``client_tool`` (the browser runs
    it). ``status``: ``pending``, ``approved``, ``denied``, ``expired`` (counts as denied) or
    ``answered`` (a client tool's result came). ``applied``: the run has taken it into a step.
    """

    tool_call_id: str
    approval_id: str
    kind: Literal["approval", "client_tool"]
    status: Literal["pending", "approved", "denied", "expired", "answered"]
    reason: str = ""
    applied: bool = False

    @property
    def denied(self) -> bool:
        return self.status in ("denied", "expired")


@dataclass(frozen=True, slots=True)
class MessagePage:
    messages: list[StoredMessage]
    has_more: bool
    total: int


class StateStore(abc.ABC):
    """Read access to sessions: messages, state, current run and checkpoint."""

    @abc.abstractmethod
    async def session_exists(self, session_id: str) -> bool:
        """Whether the session exists."""

    @abc.abstractmethod
    async def get_messages(self, session_id: str, offset: int = 0, limit: int | None = None) -> MessagePage:
        """Messages in order from ``offset`` (``limit`` None: all), with a has-more flag."""

    @abc.abstractmethod
    async def get_state(self, session_id: str) -> dict[str, Any]:
        """The agent state of the session (``{}`` when none)."""

    @abc.abstractmethod
    async def get_current_run(self, session_id: str) -> RunInfo | None:
        """The latest run of the session, or ``None``."""

    @abc.abstractmethod
    async def get_checkpoint(self, session_id: str) -> CheckpointInfo | None:
        """The latest checkpoint of the current run, or ``None``."""

    async def get_tool_decisions(self, session_id: str) -> dict[str, ToolDecision]:
        """The calls the session's runs paused on, by tool call id (none for a store without pauses)."""
        return {}

    async def find_checkpoint(self, session_id: str, checkpoint_id: str) -> CheckpointInfo | None:
        """Checkpoint ``checkpoint_id`` of the session, with its state; ``None`` when it has no
        such checkpoint. A store that keeps only the latest checkpoint finds only that one."""
        latest = await self.get_checkpoint(session_id)
        return latest if latest is not None and latest.checkpoint_id == checkpoint_id else None


@dataclass
class _Session:
    messages: list[StoredMessage] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    run: RunInfo | None = None
    checkpoint: CheckpointInfo | None = None
    decisions: dict[str, ToolDecision] = field(default_factory=dict)


class InMemoryStateStore(StateStore):
    """Sessions in a dict: for the embedded default, demos and tests."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    # -- writing (what a runtime or a view does) -----------------------------------------------

    def create_session(self, session_id: str, *, state: dict[str, Any] | None = None) -> None:
        with self._lock:
            self._sessions.setdefault(session_id, _Session(state=dict(state or {})))

    def append_messages(self, session_id: str, messages: list[StoredMessage]) -> None:
        with self._lock:
            self._sessions[session_id].messages.extend(messages)

    def set_state(self, session_id: str, state: dict[str, Any]) -> None:
        with self._lock:
            self._sessions[session_id].state = copy.deepcopy(state)

    def set_run(self, session_id: str, run: RunInfo | None) -> None:
        with self._lock:
            self._sessions[session_id].run = run

    def set_checkpoint(self, session_id: str, checkpoint: CheckpointInfo | None) -> None:
        with self._lock:
            self._sessions[session_id].checkpoint = checkpoint

    def set_tool_decision(self, session_id: str, decision: ToolDecision) -> None:
        with self._lock:
            self._sessions[session_id].decisions[decision.tool_call_id] = decision

    # -- the interface -------------------------------------------------------------------------

    async def session_exists(self, session_id: str) -> bool:
        return session_id in self._sessions

    async def get_messages(self, session_id: str, offset: int = 0, limit: int | None = None) -> MessagePage:
        with self._lock:
            session = self._sessions.get(session_id)
            messages = list(session.messages) if session else []
        end = len(messages) if limit is None else offset + limit
        return MessagePage(messages[offset:end], end < len(messages), len(messages))

    async def get_state(self, session_id: str) -> dict[str, Any]:
        session = self._sessions.get(session_id)
        return copy.deepcopy(session.state) if session else {}

    async def get_current_run(self, session_id: str) -> RunInfo | None:
        session = self._sessions.get(session_id)
        return session.run if session else None

    async def get_checkpoint(self, session_id: str) -> CheckpointInfo | None:
        session = self._sessions.get(session_id)
        return session.checkpoint if session else None

    async def get_tool_decisions(self, session_id: str) -> dict[str, ToolDecision]:
        session = self._sessions.get(session_id)
        return dict(session.decisions) if session else {}
