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

from django.db import transaction
from django.utils import timezone

from chat.exceptions import DecisionExpiredError, DecisionRejectedError
from chat.models import PendingCall
from chat.state.db import db

__all__ = ["ToolAnswer", "decide", "decide_calls", "run_is_answered"]


@dataclass(frozen=True)
class ToolAnswer:
    """What the client says about one tool call of the message it continues: an approval decision
    (``approval_id``, ``approved``, ``reason``) or a client tool's ``output`` / ``error``.
    ``state`` is the state of the client's tool part (``approval-responded`` before the server has
    applied the decision)."""

    tool_call_id: str
    approval_id: str | None = None
    approved: bool | None = None
    reason: str = ""
    output: Any = None
    error: str = ""
    state: str = ""


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
