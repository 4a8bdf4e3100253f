"""What the runtime needs from a database, as an interface (Django implements it in ``chat``).

The runtime loads a session's history and state, and after every step commits the step's
messages, the new state and a checkpoint in one transaction. Starting and finishing runs is the
executor's side of the same interface.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from streams.exceptions import HelixError
from streams.messages import StoredMessage

__all__ = ["RunConflictError", "RunOutcome", "RunRecorder", "SessionSnapshot", "UnknownSessionError"]


class RunConflictError(HelixError):
    """The session already has a run in flight."""

    code = "RUN_CONFLICT"
    status_code = 409


class UnknownSessionError(HelixError):
    """No such session."""

    code = "SESSION_NOT_FOUND"
    status_code = 404


@dataclass(frozen=True, slots=True)
class SessionSnapshot:
    """A session's history and state, as a run starts from them."""

    session_id: str
    agent: str
    messages: list[StoredMessage]
    state: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a run ended."""

    status: str  # completed | failed | interrupted | paused
    output: Any = None
    error_code: str = ""
    error_message: str = ""
    usage: dict[str, int] = field(default_factory=dict)


class RunRecorder(abc.ABC):
    """Persistence of sessions, runs, messages and checkpoints."""

    @abc.abstractmethod
    async def start_run(
        self,
        session_id: str,
        agent: str,
        *,
        user_message: StoredMessage | None,
        messages: list[StoredMessage] | None = None,
        state: dict[str, Any] | None = None,
        start_sequence: int,
        message_id: str,
        owner_id: int | None = None,
    ) -> str:
        """Create the session if new, apply the ``messages``/``state`` overrides, append the user
        message and create a queued run; return its id. Raises :class:`RunConflictError` when the
        session has a run in flight."""

    @abc.abstractmethod
    async def load_session(self, session_id: str) -> SessionSnapshot:
        """History and state of the session."""

    @abc.abstractmethod
    async def mark_running(self, run_id: str, *, worker: str = "") -> None:
        """The run started executing."""

    @abc.abstractmethod
    async def commit_step(
        self, run_id: str, step: int, messages: list[StoredMessage], state: dict[str, Any], stream_sequence: int
    ) -> tuple[str, int]:
        """Atomically append the step's messages, store the state, count the step and write a
        checkpoint. Returns ``(checkpoint id, session message count)``."""

    @abc.abstractmethod
    async def finish_run(self, run_id: str, outcome: RunOutcome) -> None:
        """Record how the run ended."""

    @abc.abstractmethod
    async def run_status(self, run_id: str) -> str:
        """The run's recorded status (a stop request sets ``interrupted`` from outside)."""
