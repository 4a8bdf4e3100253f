"""The decision rules on stored pending calls, without a run going: what is accepted, what is
refused, and that a refused batch changes nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from chat.exceptions import DecisionExpiredError, DecisionRejectedError
from chat.models import ChatSession, PendingCall, Run
from chat.state.approvals import ToolAnswer, decide_calls, run_is_answered

pytestmark = pytest.mark.django_db


@pytest.fixture
def run() -> Run:
    session = ChatSession.objects.create(agent="assistant")
    return Run.objects.create(session=session, agent="assistant", status=Run.Status.PAUSED)


def pending(run: Run, call_id: str, kind: str = PendingCall.Kind.APPROVAL, **fields: Any) -> PendingCall:
    fields.setdefault("expires_at", timezone.now() + timedelta(hours=1))
    return PendingCall.objects.create(
        run=run, session=run.session, kind=kind, tool_call_id=call_id, tool_name="send_email", **fields
    )


def statuses(run: Run) -> dict[str, str]:
    return dict(PendingCall.objects.filter(run=run).values_list("tool_call_id", "status"))


def test_an_approval_and_a_client_result_are_recorded_with_who_and_when(run: Run, django_user_model: Any) -> None:
    user = django_user_model.objects.create_user("decider")
    gate, client = pending(run, "c1"), pending(run, "c2", PendingCall.Kind.CLIENT_TOOL)
    answers = [
        ToolAnswer("c1", approval_id=str(gate.id), approved=False, reason="no"),
        ToolAnswer("c2", output={"city": "Lisbon"}),
    ]
    assert decide_calls(str(run.pk), answers, user.pk, require_all=True) == ["c1", "c2"]
    gate.refresh_from_db()
    client.refresh_from_db()
    assert (gate.status, gate.reason, gate.decided_by_id) == ("denied", "no", user.pk)
    assert (client.status, client.output) == ("answered", {"city": "Lisbon"})
    assert gate.decided_at is not None and run_is_answered(str(run.pk))


def test_answers_to_calls_of_an_earlier_step_are_skipped(run: Run) -> None:
    gate = pending(run, "c2")
    pending(run, "c1", status=PendingCall.Status.APPROVED)
    answers = [
        ToolAnswer("c1", approval_id=str(PendingCall.objects.get(tool_call_id="c1").id), approved=True),
        ToolAnswer("c2", approval_id=str(gate.id), approved=True),
    ]
    assert decide_calls(str(run.pk), answers, None, require_all=True) == ["c2"]


def test_a_partial_answer_is_kept_only_when_not_all_are_required(run: Run) -> None:
    first, _ = pending(run, "c1"), pending(run, "c2")
    answer = ToolAnswer("c1", approval_id=str(first.id), approved=True)
    with pytest.raises(DecisionRejectedError, match="still unanswered: c2"):
        decide_calls(str(run.pk), [answer], None, require_all=True)
    assert statuses(run) == {"c1": "pending", "c2": "pending"}
    assert decide_calls(str(run.pk), [answer], None, require_all=False) == ["c1"]
    assert statuses(run) == {"c1": "approved", "c2": "pending"} and not run_is_answered(str(run.pk))


REFUSED: list[tuple[str, Any, type[Exception], str]] = [
    (
        "unknown approval id",
        lambda gate: ToolAnswer("c1", approval_id="nope", approved=True),
        DecisionRejectedError,
        "Unknown approval",
    ),
    (
        "a result where a decision is due",
        lambda gate: ToolAnswer("c1", output=1),
        DecisionRejectedError,
        "needs an approval",
    ),
    (
        "a decision without its approval id",
        lambda gate: ToolAnswer("c1", approved=True),
        DecisionRejectedError,
        "needs an approval",
    ),
]


@pytest.mark.parametrize(("case", "answer", "error", "says"), REFUSED, ids=[row[0] for row in REFUSED])
def test_a_refused_answer_changes_nothing(run: Run, case: str, answer: Any, error: type[Exception], says: str) -> None:
    gate, other = pending(run, "c1"), pending(run, "c2")
    good = ToolAnswer("c2", approval_id=str(other.id), approved=True)  # refused with the bad one: all or none
    with pytest.raises(error, match=says):
        decide_calls(str(run.pk), [good, answer(gate)], None, require_all=False)
    assert statuses(run) == {"c1": "pending", "c2": "pending"}


def test_a_client_tool_refuses_a_decision(run: Run) -> None:
    call = pending(run, "c1", PendingCall.Kind.CLIENT_TOOL)
    with pytest.raises(DecisionRejectedError, match="needs the client tool's result"):
        decide_calls(str(run.pk), [ToolAnswer("c1", approval_id=str(call.id), approved=True)], None, require_all=True)


def test_an_expired_call_and_a_decided_one_are_refused(run: Run) -> None:
    gate = pending(run, "c1", expires_at=timezone.now() - timedelta(seconds=1))
    answer = ToolAnswer("c1", approval_id=str(gate.id), approved=True)
    with pytest.raises(DecisionExpiredError) as expired:
        decide_calls(str(run.pk), [answer], None, require_all=True)
    assert expired.value.status_code == 410
    PendingCall.objects.filter(pk=gate.pk).update(status=PendingCall.Status.EXPIRED)
    with pytest.raises(DecisionRejectedError, match="waits on no tool call") as rejected:
        decide_calls(str(run.pk), [answer], None, require_all=True)
    assert rejected.value.status_code == 409 and statuses(run) == {"c1": "expired"}


def test_long_reasons_and_errors_are_cut_to_what_is_stored(run: Run) -> None:
    gate, client = pending(run, "c1"), pending(run, "c2", PendingCall.Kind.CLIENT_TOOL)
    answers = [
        ToolAnswer("c1", approval_id=str(gate.id), approved=False, reason="r" * 5000),
        ToolAnswer("c2", error="e" * 5000),
    ]
    decide_calls(str(run.pk), answers, None, require_all=True)
    gate.refresh_from_db()
    client.refresh_from_db()
    assert len(gate.reason) == 2000 and len(client.error) == 2000


def test_answers_to_no_pending_call_are_refused(run: Run) -> None:
    pending(run, "c1")
    with pytest.raises(DecisionRejectedError, match="answers none"):
        decide_calls(str(run.pk), [ToolAnswer("c9", output=1)], None, require_all=False)
    assert statuses(run) == {"c1": "pending"}
