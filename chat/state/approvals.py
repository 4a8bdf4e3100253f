"""Answers to paused tool calls: approval decisions and client tool results, checked and recorded.

A run that pauses leaves one :class:`~chat.models.PendingCall` per call it waits on. A decision
is accepted once, for a pending call of that run, before it expires, and an approval decision
must name the call's approval id: anything else is rejected with a typed error and changes
nothing. Once no call of the run is pending, the run can be resumed (:func:`run_is_answered`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from chat.models import PendingCall
from chat.state.db import db
from streams.exceptions import HelixError

__all__ = ["DecisionExpiredError", "DecisionRejectedError", "ToolAnswer", "decide", "decide_calls", "run_is_answered"]


@dataclass(frozen=True)
class ToolAnswer:
    """What the client says about one tool call of the message it continues: an approval decision
    (``approval_id``, ``approved``, ``reason``) or a client tool's ``output`` / ``error``."""

    tool_call_id: str
    approval_id: str | None = None
    approved: bool | None = None
    reason: str = ""
    output: Any = None
    error: str = ""


class DecisionRejectedError(HelixError):
    """The answer does not fit a pending call of this run (unknown, already decided, or wrong kind)."""

    code = "DECISION_REJECTED"
    status_code = 409


class DecisionExpiredError(HelixError):
    """The pending call expired before the answer came."""

    code = "DECISION_EXPIRED"
    status_code = 410


def decide_calls(run_id: str, answers: Iterable[ToolAnswer], user_id: int | None, *, require_all: bool) -> list[str]:
    """Record ``answers`` for the run's pending calls, all or none; return the tool call ids
    decided. With ``require_all`` every pending call must be answered (a continuation POST)."""
    now = timezone.now()
    with transaction.atomic():
        calls = list(PendingCall.objects.select_for_update().filter(run_id=run_id))
        pending = {c.tool_call_id: c for c in calls if c.status == PendingCall.Status.PENDING}
        known_ids = {str(c.id) for c in calls}
        if not pending:
            raise DecisionRejectedError("The run waits on no tool call")
        decided: list[PendingCall] = []
        for answer in answers:
            if answer.approval_id is not None and answer.approval_id not in known_ids:
                raise DecisionRejectedError(f"Unknown approval {answer.approval_id!r}")
            call = pending.get(answer.tool_call_id)
            if call is None:
                continue  # a call of an earlier step, answered and applied already
            if call.expires_at <= now:
                raise DecisionExpiredError(f"The {call.kind.replace('_', ' ')} for {call.tool_name} expired")
            if call.kind == PendingCall.Kind.APPROVAL:
                if answer.approved is None or answer.approval_id != str(call.id):
                    raise DecisionRejectedError(f"Tool call {call.tool_call_id} needs an approval decision")
                call.status = PendingCall.Status.APPROVED if answer.approved else PendingCall.Status.DENIED
                call.reason = answer.reason[:2000]
            else:
                if answer.approved is not None:
                    raise DecisionRejectedError(f"Tool call {call.tool_call_id} needs the client tool's result")
                call.status = PendingCall.Status.ANSWERED
                call.output, call.error = answer.output, answer.error[:2000]
            call.decided_at, call.decided_by_id = now, user_id
            decided.append(call)
        if not decided:
            raise DecisionRejectedError("The request answers none of the pending tool calls")
        missing = sorted(set(pending) - {c.tool_call_id for c in decided})
        if require_all and missing:
            raise DecisionRejectedError(f"Tool calls still unanswered: {', '.join(missing)}")
        fields = ["status", "reason", "output", "error", "decided_at", "decided_by"]
        PendingCall.objects.bulk_update(decided, fields)
    return [c.tool_call_id for c in decided]


async def decide(run_id: str, answers: list[ToolAnswer], user_id: int | None) -> list[str]:
    """:func:`decide_calls` for a continuation POST: every pending call must be answered."""
    return await db(decide_calls)(run_id, answers, user_id, require_all=True)


def run_is_answered(run_id: str) -> bool:
    """True when no call of the run is pending any more."""
    return not PendingCall.objects.filter(run_id=run_id, status=PendingCall.Status.PENDING).exists()


async def resume_answered_run(session_id: str, run_id: str, agent: str) -> None:
    """Reopen the paused stream and send the run to a worker: its calls all have answers."""
    from chat.services import get_executor
    from streams.backends import get_stream_manager

    await get_stream_manager().resume_stream(session_id)
    await get_executor().resume(run_id, agent)


def answer_from_admin(call: PendingCall, *, approved: bool, user_id: int | None) -> bool:
    """A staff decision from the admin; True when it was the run's last pending call (the run
    then goes on)."""
    answer = ToolAnswer(call.tool_call_id, approval_id=str(call.id), approved=approved, reason="decided in the admin")
    decide_calls(str(call.run_id), [answer], user_id, require_all=False)
    if not run_is_answered(str(call.run_id)):
        return False
    run = call.run
    async_to_sync(resume_answered_run)(str(run.session_id), str(run.pk), run.agent)
    return True
