"""The Django state store: the bridge's read interface and the runtime's write interface."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from chat.ai_sdk.snapshot import SnapshotDeps, build_snapshot
from chat.ai_sdk.ui_messages import DynamicToolUIPart
from chat.models import ChatSession, Checkpoint, Message, Run
from chat.state.store import DjangoStateStore
from streams.backends import InMemoryStreamManager
from streams.messages import StoredMessage, ToolCall
from workers.exceptions import RunConflictError, RunErrorCode, RunSupersededError, SessionNotFoundError
from workers.runtime.persistence import RunOutcome

pytestmark = pytest.mark.django_db(transaction=True)

USER = StoredMessage(role="user", id="u1", content="What is 6 times 7?")
STEP = [
    StoredMessage(
        role="assistant",
        id="m1",
        content="Let me compute.",
        tool_calls=[ToolCall(id="c1", name="calc", arguments={"a": 6, "b": 7})],
    ),
    StoredMessage(role="tool", tool_call_id="c1", content="42"),
]


async def expire_lease(run_id: str) -> None:
    await Run.objects.filter(pk=run_id).aupdate(lease_expires_at=timezone.now() - timedelta(seconds=1))


async def test_leases_claims_and_fencing() -> None:
    store = DjangoStateStore()
    session_id = str(uuid.uuid4())
    run_id = await store.start_run(session_id, "tools", user_message=USER, start_sequence=0, message_id="m1")
    first = await store.claim_run(run_id, "w1", 30)
    assert first is not None and first.epoch == 1 and not first.takeover
    assert await store.claim_run(run_id, "w2", 30) is None  # held under a live lease
    await store.commit_step(run_id, 1, STEP, {"calls": 1}, 12, epoch=1)
    assert await store.renew_leases("w1", [run_id], 30) == {run_id}

    await expire_lease(run_id)  # w1 went silent
    second = await store.claim_run(run_id, "w2", 30)
    assert second is not None
    assert (second.reason, second.attempt, second.epoch, second.step_count) == ("worker_lost", 2, 2, 1)
    assert second.checkpoint_id is not None and second.checkpoint_sequence == 12
    assert await store.renew_leases("w1", [run_id], 30) == set()  # w1 learns it lost the run
    with pytest.raises(RunSupersededError):
        await store.commit_step(run_id, 2, [StoredMessage(role="assistant", content="zombie")], {}, 20, epoch=1)
    with pytest.raises(RunSupersededError):
        await store.finish_run(run_id, RunOutcome("completed"), epoch=1)
    assert [m.content async for m in Message.objects.filter(session_id=session_id).order_by("position")] == [
        USER.content,
        "Let me compute.",
        "42",
    ]

    assert await store.release_run(run_id, 1) is False  # not the holder
    assert await store.release_run(run_id, 2) is True  # a clean shutdown hands it back
    third = await store.claim_run(run_id, "w3", 30)
    assert third is not None and (third.reason, third.attempt, third.epoch) == ("handed_back", 2, 3)

    await expire_lease(run_id)
    fourth = await store.claim_run(run_id, "w4", 30)
    assert fourth is not None and fourth.attempt == 3
    await expire_lease(run_id)
    assert await store.claim_run(run_id, "w5", 30) is None  # out of attempts: the reaper fails it
    await store.finish_run(run_id, RunOutcome("completed", output="ok"), epoch=4)
    run = await Run.objects.aget(pk=run_id)
    assert (run.status, run.lease_expires_at) == ("completed", None)


async def test_epochs_grow_across_a_sessions_runs() -> None:
    store = DjangoStateStore()
    session_id = str(uuid.uuid4())
    run_id = await store.start_run(session_id, "tools", user_message=USER, start_sequence=0, message_id="m1")
    assert (await store.claim_run(run_id, "w1", 30)).epoch == 1  # type: ignore[union-attr]
    await store.finish_run(run_id, RunOutcome("completed"), epoch=1)
    next_run = await store.start_run(session_id, "tools", user_message=USER, start_sequence=9, message_id="m2")
    assert (await store.claim_run(next_run, "w1", 30)).epoch == 2  # type: ignore[union-attr]
    assert await store.claim_run(str(uuid.uuid4()), "w1", 30) is None
    assert await store.claim_run("not-a-uuid", "w1", 30) is None


def test_migrations_are_in_sync() -> None:
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


async def test_a_run_from_start_to_finish() -> None:
    store = DjangoStateStore()
    session_id = str(uuid.uuid4())
    assert not await store.session_exists(session_id)
    run_id = await store.start_run(session_id, "tools", user_message=USER, start_sequence=7, message_id="m1")
    assert await store.session_exists(session_id)
    run = await store.get_current_run(session_id)
    assert run is not None and (run.run_id, run.status, run.start_sequence, run.message_offset) == (
        run_id,
        "queued",
        7,
        1,
    )
    claim = await store.claim_run(run_id, "w1", 30)
    assert claim is not None and (claim.reason, claim.attempt, claim.epoch, claim.step_count) == ("start", 1, 1, 0)
    checkpoint_id, count = await store.commit_step(run_id, 1, STEP, {"calls": 1}, 12, epoch=1)
    assert count == 3
    await store.commit_step(run_id, 2, [StoredMessage(role="assistant", id="m1", content="42.")], {"calls": 1}, 15)
    await store.finish_run(run_id, RunOutcome("completed", output={"answer": 42}, usage={"total_tokens": 9}))

    page = await store.get_messages(session_id)
    assert page.total == 4 and not page.has_more
    assert page.messages[0] == USER and page.messages[1:3] == STEP
    assert (await store.get_messages(session_id, 1, 2)).has_more
    assert await store.get_state(session_id) == {"calls": 1}
    checkpoint = await store.get_checkpoint(session_id)
    assert checkpoint is not None and (checkpoint.step, checkpoint.message_count, checkpoint.stream_sequence) == (
        2,
        4,
        15,
    )
    row = await Run.objects.aget(pk=run_id)
    assert (row.status, row.step_count, row.output, row.worker) == ("completed", 2, {"answer": 42}, "w1")
    assert row.started_at and row.finished_at and row.usage == {"total_tokens": 9}
    session = await ChatSession.objects.aget(pk=session_id)
    assert (session.status, session.agent, session.title) == ("idle", "tools", "What is 6 times 7?")
    assert await Checkpoint.objects.filter(run_id=run_id).acount() == 2
    assert str((await Checkpoint.objects.filter(run_id=run_id, step=1).aget()).id) == checkpoint_id


async def test_one_run_in_flight_per_session() -> None:
    store = DjangoStateStore()
    session_id = str(uuid.uuid4())
    run_id = await store.start_run(session_id, "chat", user_message=USER, start_sequence=0, message_id="m1")
    with pytest.raises(RunConflictError) as info:
        await store.start_run(session_id, "chat", user_message=USER, start_sequence=0, message_id="m2")
    assert info.value.status_code == 409
    assert await Message.objects.filter(session_id=session_id).acount() == 1  # the refused start changed nothing
    await store.finish_run(
        run_id, RunOutcome("failed", error_code=RunErrorCode.PROVIDER_OVERLOADED, error_message="busy")
    )
    assert (await ChatSession.objects.aget(pk=session_id)).status == "failed"
    await store.start_run(session_id, "chat", user_message=USER, start_sequence=3, message_id="m2")


async def test_concurrent_starts_admit_exactly_one() -> None:
    store = DjangoStateStore()
    session_id = str(uuid.uuid4())
    await store.start_run(session_id, "chat", user_message=USER, start_sequence=0, message_id="m0")
    await store.finish_run((await store.get_current_run(session_id)).run_id, RunOutcome("completed"))  # type: ignore[union-attr]
    results = await asyncio.gather(
        *(
            store.start_run(session_id, "chat", user_message=USER, start_sequence=1, message_id=f"m{i}")
            for i in range(5)
        ),
        return_exceptions=True,
    )
    assert sum(isinstance(r, str) for r in results) == 1
    assert all(isinstance(r, RunConflictError) for r in results if not isinstance(r, str))


async def test_messages_and_state_overrides() -> None:
    store = DjangoStateStore()
    session_id = str(uuid.uuid4())
    first = await store.start_run(session_id, "chat", user_message=USER, start_sequence=0, message_id="m1")
    await store.commit_step(first, 1, STEP, {"a": 1}, 4)
    await store.finish_run(first, RunOutcome("completed"))
    history = [StoredMessage(role="user", content="Earlier"), StoredMessage(role="assistant", content="Sure.")]
    await store.start_run(
        session_id, "chat", user_message=USER, messages=history, state={"b": 2}, start_sequence=4, message_id="m2"
    )
    snapshot = await store.load_session(session_id)
    assert [m.content for m in snapshot.messages] == ["Earlier", "Sure.", USER.content]
    assert snapshot.state == {"b": 2}
    assert (await store.get_current_run(session_id)).message_offset == 3  # type: ignore[union-attr]


async def test_unknown_and_malformed_session_ids() -> None:
    store = DjangoStateStore()
    for session_id in (str(uuid.uuid4()), "not-a-uuid", "a/b", "x" * 300):
        assert not await store.session_exists(session_id)
        assert (await store.get_messages(session_id)).messages == []
        assert await store.get_state(session_id) == {}
        assert await store.get_current_run(session_id) is None
        assert await store.get_checkpoint(session_id) is None
        with pytest.raises(SessionNotFoundError):
            await store.load_session(session_id)
    with pytest.raises(SessionNotFoundError):
        await store.start_run("a/b", "chat", user_message=USER, start_sequence=0, message_id="m")


async def test_stop_request_interrupts_the_active_run() -> None:
    store = DjangoStateStore()
    session_id = str(uuid.uuid4())
    run_id = await store.start_run(session_id, "chat", user_message=USER, start_sequence=0, message_id="m1")
    assert await store.request_stop(session_id)
    assert await store.run_status(run_id) == "interrupted"
    assert not await store.request_stop(session_id)


async def test_snapshot_from_the_database() -> None:
    store = DjangoStateStore()
    streams = InMemoryStreamManager()
    session_id = str(uuid.uuid4())
    run_id = await store.start_run(session_id, "tools", user_message=USER, start_sequence=0, message_id="m1")
    await streams.create_writer(session_id, run_id)
    await store.commit_step(run_id, 1, STEP, {}, 0)
    await store.finish_run(run_id, RunOutcome("completed"))
    await streams.end_stream(session_id)
    snapshot = await build_snapshot(SnapshotDeps(store, streams), session_id)
    assert snapshot is not None
    assert [m.id for m in snapshot.messages] == ["u1", "m1"]
    assert snapshot.messages[1].parts[1] == DynamicToolUIPart(
        "calc", tool_call_id="c1", state="output-available", input={"a": 6, "b": 7}, output=42
    )
    assert await build_snapshot(SnapshotDeps(store, streams), str(uuid.uuid4())) is None
