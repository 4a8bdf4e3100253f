"""Runs that wait on a person: approval gates and client tools pause the run, answers resume it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from chat.exceptions import DecisionExpiredError, DecisionRejectedError
from chat.models import ChatSession, Message, PendingCall, Run
from chat.state.approvals import ToolAnswer, decide_calls
from chat.state.store import DjangoStateStore
from streams.backends import InMemoryStreamManager
from streams.protocol import RunPaused, RunResumed, ToolApprovalRequest, ToolEnd, ToolOutputDenied
from workers.executors import InProcessExecutor

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_model(settings: Any) -> None:
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "0"}


async def paused(executor: InProcessExecutor, question: str) -> tuple[Any, PendingCall]:
    handle = await executor.execute("assistant", question)
    outcome = await handle.result(timeout=30)
    assert outcome.status == "paused"
    call = await PendingCall.objects.aget(run_id=handle.run_id)
    return handle, call


async def resumed(executor: InProcessExecutor, run_id: str) -> str:
    await executor.resume(run_id, "assistant")
    for _ in range(300):
        status = await executor.recorder.run_status(run_id)
        if status not in ("paused", "queued", "running"):
            return status
        await asyncio.sleep(0.02)
    raise AssertionError("the run did not finish after its resume")


async def conversation(session_id: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) async for m in Message.objects.filter(session_id=session_id).order_by("position")]


async def test_an_approved_call_runs_after_the_pause_in_the_same_run() -> None:
    streams = InMemoryStreamManager()
    executor = InProcessExecutor(DjangoStateStore(), streams)
    handle, call = await paused(executor, "Email the team the report")
    run = await Run.objects.aget(pk=handle.run_id)
    info = await streams.get_stream_info(handle.session_id)
    assert (run.status, call.kind, call.status, info.status) == ("paused", "approval", "pending", "paused")  # type: ignore[union-attr]
    chunks = [c for c, _ in await streams.get_all_chunks(handle.session_id)]
    request = next(c for c in chunks if isinstance(c, ToolApprovalRequest))
    assert request.approval_id == str(call.id) and request.tool_call_id == call.tool_call_id
    assert next(c for c in chunks if isinstance(c, RunPaused)).pending_tool_call_ids == [call.tool_call_id]

    answer = ToolAnswer(call.tool_call_id, approval_id=str(call.id), approved=True)
    assert await asyncio.to_thread(decide_calls, handle.run_id, [answer], None, require_all=True) == [call.tool_call_id]
    assert await resumed(executor, handle.run_id) == "completed"
    run = await Run.objects.aget(pk=handle.run_id)
    assert (run.attempt, run.step_count) == (1, 2)  # the same run, one attempt
    assert await conversation(handle.session_id) == [
        ("user", "Email the team the report"),
        ("assistant", "I will send that, once you approve."),
        ("tool", '{"sent":true,"to":"team@example.com"}'),
        ("assistant", "Sent to team@example.com."),
    ]
    session = await ChatSession.objects.aget(pk=handle.session_id)
    assert session.state == {"sent": ["Email the team the report"]}
    chunks = [c for c, _ in await streams.get_all_chunks(handle.session_id)]
    assert any(isinstance(c, RunResumed) for c in chunks)
    assert any(isinstance(c, ToolEnd) and c.tool_call_id == call.tool_call_id for c in chunks)
    assert (await PendingCall.objects.aget(pk=call.pk)).applied


async def test_a_denied_call_never_runs() -> None:
    executor = InProcessExecutor(DjangoStateStore(), InMemoryStreamManager())
    handle, call = await paused(executor, "Email everyone")
    answer = ToolAnswer(call.tool_call_id, approval_id=str(call.id), approved=False, reason="not today")
    await asyncio.to_thread(decide_calls, handle.run_id, [answer], None, require_all=True)
    assert await resumed(executor, handle.run_id) == "completed"
    assert (await conversation(handle.session_id))[2:] == [
        ("tool", "The user denied this tool call: not today"),
        ("assistant", "Understood: I did not send it."),
    ]
    assert (await ChatSession.objects.aget(pk=handle.session_id)).state == {}
    chunks = [c for c, _ in await executor.streams.get_all_chunks(handle.session_id)]
    assert [c.reason for c in chunks if isinstance(c, ToolOutputDenied)] == ["not today"]


async def test_a_client_tool_result_comes_back_into_the_run() -> None:
    executor = InProcessExecutor(DjangoStateStore(), InMemoryStreamManager())
    handle, call = await paused(executor, "Where am I?")
    assert (call.kind, call.tool_name) == ("client_tool", "get_location")
    answer = ToolAnswer(call.tool_call_id, output={"city": "Lisbon"})
    await asyncio.to_thread(decide_calls, handle.run_id, [answer], None, require_all=True)
    assert await resumed(executor, handle.run_id) == "completed"
    assert (await conversation(handle.session_id))[-1] == ("assistant", "You are in Lisbon.")


async def test_forged_late_and_repeated_answers_are_rejected_and_change_nothing() -> None:
    executor = InProcessExecutor(DjangoStateStore(), InMemoryStreamManager())
    handle, call = await paused(executor, "Email the board")
    right = ToolAnswer(call.tool_call_id, approval_id=str(call.id), approved=True)
    wrong = [
        ToolAnswer(call.tool_call_id, approval_id="00000000-0000-0000-0000-000000000000", approved=True),
        ToolAnswer(call.tool_call_id, output={"sent": True}),  # a result where a decision is due
        ToolAnswer("call-nobody-made", output=1),
    ]
    for answer in wrong:
        with pytest.raises(DecisionRejectedError):
            await asyncio.to_thread(decide_calls, handle.run_id, [answer], None, require_all=True)
    assert (await PendingCall.objects.aget(pk=call.pk)).status == "pending"
    assert await executor.recorder.claim_run(handle.run_id, "w", 5) is None  # nothing to resume with

    await PendingCall.objects.filter(pk=call.pk).aupdate(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(DecisionExpiredError):
        await asyncio.to_thread(decide_calls, handle.run_id, [right], None, require_all=True)
    await PendingCall.objects.filter(pk=call.pk).aupdate(expires_at=timezone.now() + timedelta(hours=1))
    await asyncio.to_thread(decide_calls, handle.run_id, [right], None, require_all=True)
    with pytest.raises(DecisionRejectedError):  # decided already
        await asyncio.to_thread(decide_calls, handle.run_id, [right], None, require_all=True)
    assert await resumed(executor, handle.run_id) == "completed"
