"""The reaper's own decisions: runs out of attempts fail, stopped runs of dead workers close."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.utils import timezone

from chat.models import ChatSession, Run
from chat.state.recovery import reap_expired_runs
from chat.state.store import DjangoStateStore
from streams.backends import get_stream_manager
from streams.exceptions import StreamUnavailableError
from streams.messages import StoredMessage
from streams.protocol import ErrorChunk, RunInterrupted
from workers.attempts import execute_run
from workers.leases import LeaseKeeper

pytestmark = pytest.mark.django_db(transaction=True)


def dead_run(status: str, attempt: int) -> tuple[str, str]:
    """A run whose worker stopped renewing its lease a minute ago."""
    session_id = str(uuid.uuid4())

    async def build() -> str:
        store = DjangoStateStore()
        run_id = await store.start_run(
            session_id, "chat", user_message=StoredMessage(role="user", content="Hi"), start_sequence=0, message_id="m"
        )
        await store.claim_run(run_id, "gone-worker", 30)
        writer = await get_stream_manager().create_writer(session_id, run_id, "chat", epoch=1)
        await writer.write({"type": "text_delta", "delta": "half an"})
        return run_id

    run_id = async_to_sync(build)()
    Run.objects.filter(pk=run_id).update(
        status=status, attempt=attempt, lease_expires_at=timezone.now() - timedelta(minutes=1)
    )
    return session_id, run_id


def test_a_run_out_of_attempts_fails_with_its_stream() -> None:
    session_id, run_id = dead_run("running", attempt=3)
    assert reap_expired_runs().failed == 1
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.error_code, run.lease_expires_at) == ("failed", "worker_lost", None)
    assert ChatSession.objects.get(pk=session_id).status == "failed"
    info = async_to_sync(get_stream_manager().get_stream_info)(session_id)
    assert info is not None and info.status == "failed" and "lost 3 times" in (info.error or "")
    chunks = [c for c, _ in async_to_sync(get_stream_manager().get_all_chunks)(session_id)]
    assert isinstance(chunks[-1], ErrorChunk) and chunks[-1].code == "worker_lost"
    assert reap_expired_runs().failed == 0  # once


def test_a_stopped_run_whose_worker_died_gets_its_stream_ended() -> None:
    session_id, run_id = dead_run("interrupted", attempt=1)
    call_command("reap_runs")
    info = async_to_sync(get_stream_manager().get_stream_info)(session_id)
    assert info is not None and info.status == "ended"
    chunks = [c for c, _ in async_to_sync(get_stream_manager().get_all_chunks)(session_id)]
    assert isinstance(chunks[-1], RunInterrupted)
    assert Run.objects.get(pk=run_id).lease_expires_at is None


class SentTasks(list[tuple[str, list[str]]]):
    """Stands in for ``current_app.send_task``: records what the reaper sends."""

    def __call__(self, name: str, args: list[str], **options: object) -> None:
        self.append((name, args))


def queued_run(age: timedelta) -> tuple[str, str]:
    """A run recorded ``age`` ago that no worker ever claimed (its queue message was lost)."""
    session_id = str(uuid.uuid4())

    async def build() -> str:
        store = DjangoStateStore()
        run_id = await store.start_run(
            session_id, "chat", user_message=StoredMessage(role="user", content="Hi"), start_sequence=0, message_id="m"
        )
        await get_stream_manager().create_writer(session_id, run_id, "chat")
        return run_id

    run_id = async_to_sync(build)()
    Run.objects.filter(pk=run_id).update(created_at=timezone.now() - age)
    return session_id, run_id


def test_a_run_whose_queue_message_was_lost_is_sent_again_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from celery import current_app

    sent = SentTasks()
    monkeypatch.setattr(current_app, "send_task", sent)
    _, fresh = queued_run(timedelta(seconds=1))  # just queued: a worker will take it
    _, run_id = queued_run(timedelta(minutes=1))
    assert reap_expired_runs().dispatched == 1
    assert sent == [("helix.run_agent", [run_id])]
    assert reap_expired_runs().dispatched == 0  # not again right away
    assert Run.objects.get(pk=fresh).status == "queued"


def test_a_run_no_worker_took_within_the_time_limit_fails_and_frees_its_session() -> None:
    session_id, run_id = queued_run(timedelta(hours=2))  # past RUN_TIME_LIMIT_SECONDS
    assert reap_expired_runs().failed == 1
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.error_code) == ("failed", "not_started")
    chunks = [c for c, _ in async_to_sync(get_stream_manager().get_all_chunks)(session_id)]
    assert isinstance(chunks[-1], ErrorChunk) and (chunks[-1].code, chunks[-1].recoverable) == ("not_started", True)
    # the session takes a new message
    async_to_sync(DjangoStateStore().start_run)(
        session_id, "chat", user_message=StoredMessage(role="user", content="Again"), start_sequence=2, message_id="m2"
    )


def test_a_run_its_worker_still_marks_alive_is_not_taken_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """A database stall: the lease in the database expired (renewals could not commit), but the
    worker still marks the run alive in the stream store, so the reaper leaves it alone; once the
    mark lapses too, the run is sent to another worker."""
    sent = SentTasks()
    monkeypatch.setattr("celery.current_app.send_task", sent)
    _, run_id = dead_run("running", attempt=1)
    async_to_sync(get_stream_manager().mark_alive)([run_id], 0.5)
    assert reap_expired_runs().dispatched == 0 and sent == []
    assert Run.objects.get(pk=run_id).status == "running"
    time.sleep(0.6)
    assert reap_expired_runs().dispatched == 1
    assert sent == [("helix.run_agent", [run_id])]


def test_a_takeover_message_that_arrives_while_the_run_is_marked_alive_claims_nothing() -> None:
    """A message to take a run over can reach a worker long after it was sent (queued behind a
    database stall, say), when the run's worker is marking it alive again: it takes nothing,
    even though the lease in the database has lapsed. Once no one marks the run, it is taken."""
    _, run_id = dead_run("running", attempt=1)
    streams = get_stream_manager()
    async_to_sync(streams.mark_alive)([run_id], 30)
    rescuer = LeaseKeeper(DjangoStateStore(), lease_seconds=30, heartbeat_seconds=600, worker="rescuer")
    assert async_to_sync(execute_run)(DjangoStateStore(), streams, run_id, rescuer) is None
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.attempt, run.worker) == ("running", 1, "gone-worker")
    assert async_to_sync(DjangoStateStore().claim_run)(run_id, "rescuer", 30, take_over=False) is None
    claim = async_to_sync(DjangoStateStore().claim_run)(run_id, "rescuer", 30)
    assert claim is not None and (claim.attempt, claim.reason) == (2, "worker_lost")


def test_a_takeover_judged_before_another_attempt_claimed_the_run_takes_nothing() -> None:
    """A message finds no mark on a queued run, then its claim waits for a busy database. Meanwhile
    another message claims the run, and its lease lapses before its first renewal gets through:
    the waiting claim was judged on a run no one held yet, so it takes nothing. A run still silent
    when a later claim looked is taken over."""
    session_id = str(uuid.uuid4())
    store = DjangoStateStore()
    run_id = async_to_sync(store.start_run)(
        session_id, "chat", user_message=StoredMessage(role="user", content="Hi"), start_sequence=0, message_id="m"
    )
    checked_at = timezone.now()  # no mark: the run is only queued
    first = async_to_sync(store.claim_run)(run_id, "first", 0.05)
    assert first is not None and first.attempt == 1
    time.sleep(0.1)  # its lease lapses, its renewal held up
    assert async_to_sync(store.claim_run)(run_id, "late", 30, checked_at=checked_at) is None
    run = Run.objects.get(pk=run_id)
    assert (run.worker, run.attempt, run.epoch) == ("first", 1, first.epoch)
    claim = async_to_sync(store.claim_run)(run_id, "rescuer", 30, checked_at=timezone.now())
    assert claim is not None and (claim.attempt, claim.reason) == (2, "worker_lost")


def test_nothing_is_taken_over_while_the_stream_store_cannot_say_what_is_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = SentTasks()
    monkeypatch.setattr("celery.current_app.send_task", sent)
    _, running = dead_run("running", attempt=3)
    _, stopped = dead_run("interrupted", attempt=1)

    async def unreachable(run_ids: list[str]) -> set[str]:
        raise StreamUnavailableError("-", "Redis unreachable")

    monkeypatch.setattr(get_stream_manager(), "alive", unreachable)
    report = reap_expired_runs()
    assert (report.dispatched, report.failed, report.closed) == (0, 0, 0) and sent == []
    assert set(Run.objects.filter(pk__in=[running, stopped]).values_list("status", flat=True)) == {
        "running",
        "interrupted",
    }
