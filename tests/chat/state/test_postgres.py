"""PostgreSQL, the production database: row locks under concurrent attempts, and a restart of
the server under a live Daphne and a Celery worker mid-run."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, connections, transaction
from django.db.models.deletion import Collector
from django.db.models.signals import post_delete
from django.utils import timezone

from chat.exceptions import DecisionRejectedError
from chat.models import ChatSession, Message, PendingCall, Run
from chat.state.approvals import ToolAnswer, decide_calls
from chat.state.cascade import delete_session
from chat.state.store import DjangoStateStore
from streams.messages import StoredMessage
from workers.exceptions import RunSupersededError
from workers.runtime.persistence import PendingCallSpec, RunOutcome

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _postgres() -> None:
    assert connection.vendor == "postgresql", "the suite runs on PostgreSQL (bin/test starts one)"


def at_once(count: int, work: Callable[[int], Any]) -> list[Any]:
    """``work(i)`` in ``count`` threads released together; each result or the exception raised."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def queued_run() -> str:
    store = DjangoStateStore()
    session_id = str(uuid.uuid4())
    return store._start_run(
        session_id, "chat", StoredMessage(role="user", content="hi"), None, None, 0, "m-1", None, None
    )


def test_concurrent_attempts_claim_a_run_once_and_epochs_only_grow() -> None:
    store = DjangoStateStore()
    run_id = queued_run()
    won = claims_of(at_once(8, lambda i: store._claim_run(run_id, f"worker-{i}", 4.0)))
    assert len(won) == 1 and won[0].epoch == 1 and won[0].reason == "start"
    Run.objects.filter(pk=run_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    takeovers = claims_of(at_once(8, lambda i: store._claim_run(run_id, f"rescuer-{i}", 4.0)))
    assert len(takeovers) == 1 and takeovers[0].reason == "worker_lost"
    run = Run.objects.get(pk=run_id)
    assert (run.epoch, run.attempt, takeovers[0].epoch) == (2, 2, 2) and run.worker.startswith("rescuer-")
    with pytest.raises(RunSupersededError, match="held by epoch 2"):
        store._finish_run(run_id, RunOutcome("completed"), epoch=1)  # the first attempt is fenced off


def test_the_database_refuses_a_second_active_run_of_a_session() -> None:
    """The partial unique index behind one active run per session, as the migrations leave it on
    PostgreSQL (migration 0003 dropped it with the session column's own index; 0004 restores it).
    Starting a run checks first, under a lock on the session; the index holds whatever writes."""
    session = ChatSession.objects.create(agent="chat")
    Run.objects.create(session=session, agent="chat", status="running", message_id="m-1")
    Run.objects.create(session=session, agent="chat", status="completed", message_id="m-0")  # ended runs are many
    for status in ("queued", "running", "paused"):
        with pytest.raises(IntegrityError), transaction.atomic():
            Run.objects.create(session=session, agent="chat", status=status, message_id=f"m-{status}")
    assert Run.objects.filter(session=session).count() == 2


def claims_of(results: list[Any]) -> list[Any]:
    """The attempts that won; an attempt that raised fails the test (losers get ``None``)."""
    assert not [r for r in results if isinstance(r, Exception)], results
    return [r for r in results if r is not None]


def test_a_decision_applies_once_whatever_the_number_of_tabs() -> None:
    store = DjangoStateStore()
    run_id = queued_run()
    claim = store._claim_run(run_id, "worker", 4.0)
    assert claim is not None
    approval_id = str(uuid.uuid4())
    spec = PendingCallSpec("call-1", "send_email", {"to": "a@b.c"}, "approval", approval_id)
    store._commit_step(run_id, 1, [], {}, 5, claim.epoch, [spec], None)
    answer = ToolAnswer("call-1", approval_id=approval_id, approved=True)
    results = at_once(6, lambda i: decide_calls(run_id, [answer], None, require_all=True))
    assert results.count(["call-1"]) == 1
    assert all(isinstance(r, DecisionRejectedError) for r in results if r != ["call-1"])
    call = PendingCall.objects.get(pk=approval_id)
    assert call.status == "approved" and call.decided_at is not None


def _pg_ctl(*args: str) -> None:
    pg_bin, data = os.environ["HELIX_TEST_PG_BIN"], os.environ["HELIX_TEST_PG_DATA"]
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, f"{pg_bin}/pg_ctl", "-D", data, "-w", "-s", *args], check=True, timeout=60)


def _forget_dead_connections() -> None:
    """This test process's own connections died with the server too: the main thread's and the
    one asgiref's thread-sensitive executor gives the async tests that follow."""
    from asgiref.sync import SyncToAsync

    connections.close_all()
    SyncToAsync.single_thread_executor.submit(connections.close_all).result(10)


def test_a_postgres_restart_mid_run_loses_nothing(live_client: Any, helix_server: str, token: str) -> None:
    """The server restarts while a run streams: the run completes, its answer is stored once, and
    the same Daphne and worker processes serve the next message without a restart."""
    session_id = str(uuid.uuid4())
    restarted = threading.Event()

    def restart_mid_run() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if Run.objects.filter(session_id=session_id, status="running").exists():
                break
            time.sleep(0.02)
        connections.close_all()
        _pg_ctl("restart", "-m", "fast")
        restarted.set()

    restarter = threading.Thread(target=restart_mid_run)
    restarter.start()
    first = live_client.run(
        "v6",
        [{"kind": "send", "text": "Research how databases restart."}, {"kind": "wait-for-end"}],
        baseUrl=helix_server,
        sessionId=session_id,
        token=token,
        agent="research",
    )
    restarter.join(60)
    assert restarted.is_set()
    _forget_dead_connections()
    run = Run.objects.get(session_id=session_id)
    assert run.status == "completed", (run.status, run.error_code, run.error_message)
    assert first["error"] is None and not first["errors"], first
    second = live_client.run(
        "v6",
        [{"kind": "send", "text": "And once more?"}],
        baseUrl=helix_server,
        sessionId=session_id,
        token=token,
        agent="chat",
        messages=first["messages"],
    )
    assert second["error"] is None and second["status"] == "ready", second
    runs = list(Run.objects.filter(session_id=session_id).values_list("status", flat=True))
    assert runs == ["completed", "completed"]
    messages = ChatSession.objects.get(pk=session_id).messages
    assert messages.filter(role="user").count() == 2
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user", "assistant"]


@pytest.mark.parametrize("how", ["queryset", "instance"])
def test_a_session_deleted_while_a_step_commits_goes_with_what_the_step_added(how: str) -> None:
    """A worker commits a step (a message) in the middle of a session's deletion (the API, the
    admin, a host site's own code): after the deletion removed the session's messages, before it
    removes the session. The deletion still succeeds and leaves nothing behind; the step is the
    one that fails (its session is gone), not the deletion, with a foreign key error."""
    run_id = queued_run()
    session_id = str(Run.objects.get(pk=run_id).session_id)
    release, committed = threading.Event(), threading.Event()
    step_error: list[Exception] = []

    def commit_step() -> None:
        try:
            with transaction.atomic():
                Message.objects.create(session_id=session_id, position=1, role="assistant", content="late")
                release.wait(10)
        except Exception as exc:
            step_error.append(exc)
        finally:
            committed.set()
            connections.close_all()

    def in_the_middle(**kwargs: Any) -> None:  # the session's runs are deleted; the session is next
        release.set()
        committed.wait(1.5)  # without a lock the step commits here, before the session goes

    def delete() -> Any:
        try:
            if how == "queryset":
                return ChatSession.objects.filter(pk=session_id).delete()[0]
            return ChatSession.objects.get(pk=session_id).delete()[0]
        except Exception as exc:
            return exc
        finally:
            connections.close_all()

    step = threading.Thread(target=commit_step)
    step.start()
    post_delete.connect(in_the_middle, sender=Run, dispatch_uid="test-step-in-the-middle")
    try:
        with ThreadPoolExecutor(1) as pool:
            result = pool.submit(delete).result(15)
    finally:
        post_delete.disconnect(sender=Run, dispatch_uid="test-step-in-the-middle")
    step.join(10)
    assert not isinstance(result, Exception), result
    assert [type(e).__name__ for e in step_error] == ["IntegrityError"]
    assert not ChatSession.objects.filter(pk=session_id).exists()
    assert not Message.objects.filter(session_id=session_id).exists()


def test_a_deletion_waits_for_a_worker_holding_a_run_instead_of_deadlocking() -> None:
    """Workers lock a run and then its session (a claim); a deletion takes the same locks in the
    same order, so the two wait for each other in turn instead of deadlocking."""
    run_id = queued_run()
    session_id = str(Run.objects.get(pk=run_id).session_id)
    holding = threading.Event()

    def claim() -> None:
        try:
            with transaction.atomic():
                list(Run.objects.select_for_update().filter(pk=run_id).values_list("pk"))
                holding.set()
                time.sleep(0.5)  # the deletion starts meanwhile
                list(ChatSession.objects.select_for_update().filter(pk=session_id).values_list("pk"))
        finally:
            connections.close_all()

    worker = threading.Thread(target=claim)
    worker.start()
    holding.wait(10)
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(lambda: _closing(delete_session, session_id)).result(15)
    worker.join(10)
    assert result is True
    assert not ChatSession.objects.filter(pk=session_id).exists()


def test_a_run_started_while_its_session_is_deleted_goes_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat POST commits a new run after the deletion collected what to delete and before it
    locked anything: the API's deletion fails on that run's foreign key once, and tries again."""
    run_id = queued_run()
    session_id = str(Run.objects.get(pk=run_id).session_id)
    collect = Collector.collect
    started: list[str] = []

    def collect_then_a_run_starts(self: Collector, objs: Any, *args: Any, **kwargs: Any) -> Any:
        collected = collect(self, objs, *args, **kwargs)
        if not started and getattr(objs, "model", None) is ChatSession:
            with ThreadPoolExecutor(1) as pool:  # the POST's own transaction, committed
                run = pool.submit(
                    _closing, Run.objects.create, **{"session_id": session_id, "agent": "chat", "status": "completed"}
                )
                started.append(str(run.result(10).pk))
        return collected

    monkeypatch.setattr(Collector, "collect", collect_then_a_run_starts)
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(lambda: _closing(delete_session, session_id)).result(15)
    assert started and result is True
    assert not Run.objects.filter(session_id=session_id).exists()


def _closing(work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return work(*args, **kwargs)
    finally:
        connections.close_all()
