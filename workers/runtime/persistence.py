"""What the runtime needs from a database, as an interface (Django implements it in ``chat``).

The runtime loads a session's history and state, and after every step commits the step's
messages, the new state and a checkpoint in one transaction. Starting and finishing runs is the
executor's side of the same interface, and so are leases: an attempt claims a run (and a new
fencing epoch), renews its lease while it runs, and can hand the run back. Every write of an
attempt names its epoch; the database refuses it once a newer attempt has claimed the run.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from streams.messages import StoredMessage
from workers.exceptions import RunErrorCode

__all__ = [
    "PendingCallSpec",
    "ResolvedCall",
    "RunClaim",
    "RunOutcome",
    "RunRecorder",
    "SessionSnapshot",
]


@dataclass(frozen=True, slots=True)
class SessionSnapshot:
    """A session's history and state, as a run starts from them."""

    session_id: str
    agent: str
    messages: list[StoredMessage]
    state: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PendingCallSpec:
    """A tool call the run pauses on: ``kind`` ``approval`` (a person decides whether it runs) or
    ``client_tool`` (the browser runs it and sends the result). ``approval_id`` names the record."""

    tool_call_id: str
    tool_name: str
    arguments: Any
    kind: str
    approval_id: str


@dataclass(frozen=True, slots=True)
class ResolvedCall:
    """A paused tool call whose answer came in: ``status`` ``approved``, ``denied``, ``expired``
    (treated as denied) or ``answered`` (a client tool's ``output`` or ``error``)."""

    tool_call_id: str
    tool_name: str
    arguments: Any
    kind: str
    status: str
    output: Any = None
    error: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RunClaim:
    """An attempt's hold on a run.

    ``epoch`` fences the attempt's writes (it exceeds every earlier epoch of the session).
    ``takeover`` is set when an earlier attempt ran: this one continues after the
    ``step_count`` steps committed so far, from checkpoint ``checkpoint_id`` whose chunks end
    at ``checkpoint_sequence``. ``reason``: ``start``, ``worker_lost``, ``handed_back`` or
    ``resumed`` (every call the run paused on has its answer).
    """

    run_id: str
    session_id: str
    agent: str
    message_id: str
    epoch: int
    attempt: int
    step_count: int
    start_sequence: int
    reason: str = "start"
    checkpoint_id: str | None = None
    checkpoint_sequence: int | None = None
    waiting: bool = False  # the last committed step still waits on a person: pause again
    previous_epoch: int = 0  # the epoch of the attempt before this one (0: none)

    @property
    def takeover(self) -> bool:
        return self.reason in ("worker_lost", "handed_back")


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a run ended."""

    status: str  # completed | failed | interrupted | paused
    output: Any = None
    error_code: RunErrorCode | Literal[""] = ""  # set when the run failed
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
        caller_owns: bool | None = None,
    ) -> str:
        """Create the session if new, apply the ``messages``/``state`` overrides, append the user
        message and create a queued run; return its id. Raises
        :class:`~workers.exceptions.RunConflictError` when the session has a run in flight.
        ``caller_owns``: whether the caller owns the session when it exists already. ``None``
        (the site's own code) takes the session whoever owns it; ``True`` takes it only when its
        owner is ``owner_id``; ``False`` (an anonymous caller with an id it never used) only when
        this call creates it. Refused, it is a :class:`~workers.exceptions.SessionNotFoundError`
        and nothing is stored."""

    @abc.abstractmethod
    async def load_session(self, session_id: str) -> SessionSnapshot:
        """History and state of the session; raises :class:`~workers.exceptions.SessionNotFoundError`."""

    @abc.abstractmethod
    async def claim_run(
        self,
        run_id: str,
        worker: str,
        lease_seconds: float,
        *,
        take_over: bool = True,
        checked_at: datetime | None = None,
    ) -> RunClaim | None:
        """Atomically take ``run_id`` for a new attempt on ``worker``, with a new epoch and a lease.

        A queued run is claimed for its first attempt (or, when handed back, for the next one
        without counting an attempt); a running run only once its lease has expired, counting
        one more attempt, and only with ``take_over`` (the caller found no worker marking it
        alive). ``checked_at``: when the caller found no mark. A claim can wait long for the
        database (a stall, a busy pool); a lease still running at that moment belongs to an
        attempt the caller never looked at (one that claimed the run meanwhile), and is not
        taken over however it stands when the claim is made. ``None`` when the run is not
        claimable (finished, paused, or held under a live lease or a live mark)."""

    @abc.abstractmethod
    async def renew_leases(self, worker: str, run_ids: list[str], lease_seconds: float) -> set[str]:
        """Extend the leases ``worker`` holds on ``run_ids``; return the ids it still holds."""

    @abc.abstractmethod
    async def release_run(self, run_id: str, epoch: int) -> bool:
        """Hand a run back (a worker shutting down) without counting an attempt: it is queued
        again, to be claimed by the next attempt. False when ``epoch`` no longer holds it."""

    @abc.abstractmethod
    async def commit_step(
        self,
        run_id: str,
        step: int,
        messages: list[StoredMessage],
        state: dict[str, Any],
        stream_sequence: int,
        *,
        epoch: int | None = None,
        pending: list[PendingCallSpec] | None = None,
        applied: list[str] | None = None,
    ) -> tuple[str, int]:
        """Atomically append the step's messages, store the state, count the step and write a
        checkpoint. Returns ``(checkpoint id, session message count)``. Raises
        :class:`~workers.exceptions.RunSupersededError` (nothing stored) when ``epoch`` no longer
        holds the run.

        In the same transaction, ``pending`` calls are recorded for the run to pause on, and the
        answered calls ``applied`` (tool call ids) are marked as taken into the history."""

    @abc.abstractmethod
    async def resolved_calls(self, run_id: str) -> list[ResolvedCall]:
        """The paused calls of the run that have an answer the run has not applied yet."""

    @abc.abstractmethod
    async def finish_run(self, run_id: str, outcome: RunOutcome, *, epoch: int | None = None) -> None:
        """Record how the run ended (fenced like :meth:`commit_step`)."""

    @abc.abstractmethod
    async def run_status(self, run_id: str) -> str:
        """The run's recorded status (a stop request sets ``interrupted`` from outside)."""

    async def stopped_runs(self, run_ids: list[str]) -> set[str]:
        """Which of ``run_ids`` their users stopped (one query where the store can)."""
        return {run_id for run_id in run_ids if await self.run_status(run_id) == "interrupted"}
