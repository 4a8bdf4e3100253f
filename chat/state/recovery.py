"""The reaper: runs whose worker went silent are handed to a live one, or failed.

A run's lease expires when its worker stops renewing it (killed, frozen, cut off). Its worker
also marks it alive in the stream store (:mod:`workers.leases`), and a run still marked there is
left alone: the database stalled, not the worker. The reaper
(``helix.reap_runs`` on Celery beat, or ``manage.py reap_runs``) sends such a run to a worker,
whose attempt claims it and takes over from the last checkpoint. A run that has used up
``HELIX["MAX_ATTEMPTS"]`` fails with ``worker_lost``, and so does its stream. A run stopped by
its user whose worker died before it could say so gets its stream ended. A run still queued a
lease after it was recorded (its queue message lost) is sent again, and failed ``not_started`` if
no worker takes it within the run time limit. A paused tool call left unanswered past its expiry
counts as denied, and its run goes on.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from asgiref.sync import async_to_sync
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from chat.models import ChatSession, PendingCall, Run
from chat.state.approvals import run_is_answered
from chat.state.executors import resume_answered_run
from streams.backends import get_stream_manager
from streams.conf import helix_settings
from streams.exceptions import HelixError, StreamSupersededError
from streams.protocol import ErrorChunk, RunInterrupted
from workers.exceptions import RunErrorCode
from workers.executors import RUN_TASK
from workers.runtime.writer import RunWriter

__all__ = ["ReapReport", "reap_expired_runs"]

logger = logging.getLogger(__name__)

# (run id, epoch) → when it was sent: an expired run is sent once per epoch, again only if the
# attempt it was sent for has not claimed it within a few leases.
_sent: dict[tuple[str, int], float] = {}


@dataclass
class ReapReport:
    dispatched: int = 0
    failed: int = 0
    closed: int = 0
    expired: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def reap_expired_runs(now: datetime | None = None) -> ReapReport:
    """One pass over the runs whose lease expired."""

    now = now or timezone.now()
    report = ReapReport()
    lease = float(helix_settings.LEASE_SECONDS)
    max_attempts = int(helix_settings.MAX_ATTEMPTS)
    expired = Run.objects.filter(lease_expires_at__lt=now, status__in=[Run.Status.RUNNING, Run.Status.INTERRUPTED])
    silent = _silent(list(expired.only("id", "session_id", "epoch", "attempt", "status")))
    for run in (run for run in silent if run.status == Run.Status.RUNNING):
        if run.attempt >= max_attempts:
            if _close(run, "failed", f"The run's worker was lost {run.attempt} times"):
                report.failed += 1
            continue
        if _send_again(run, every=3 * lease):
            report.dispatched += 1
            logger.warning("run %s (attempt %d) lost its worker: sent to another", run.pk, run.attempt)
    for run in (run for run in silent if run.status == Run.Status.INTERRUPTED):
        if _close(run, "interrupted", ""):
            report.closed += 1
    _reap_never_started(now, report)
    report.expired = _expire_pending_calls(now)
    for key, sent_at in list(_sent.items()):
        if time.monotonic() - sent_at > 10 * lease:
            del _sent[key]
    return report


def _silent(runs: list[Run]) -> list[Run]:
    """Those of ``runs`` (their database lease expired) whose worker has stopped marking them
    alive in the stream store too: a stalled database holds up lease renewals, not the marks.
    None while the store cannot say (it is unreachable): nothing is taken over on a guess."""
    if not runs:
        return []

    async def alive() -> set[str]:
        streams = get_stream_manager()
        try:
            return await streams.alive([str(run.pk) for run in runs])
        finally:
            await streams.aclose()

    try:
        marked = async_to_sync(alive)()
    except HelixError:
        logger.warning("the stream store cannot say which runs are alive: none is taken over", exc_info=True)
        return []
    for run in runs:
        if str(run.pk) in marked:
            logger.info("run %s: its lease expired but its worker still marks it alive (a database stall?)", run.pk)
    return [run for run in runs if str(run.pk) not in marked]


def _send_again(run: Run, *, every: float) -> bool:
    """Send ``run`` to the workers, unless it was sent for the same epoch less than ``every``
    seconds ago; whether it was sent."""
    from celery import current_app

    key = (str(run.pk), run.epoch)
    if time.monotonic() - _sent.get(key, -1e9) < every:
        return False
    _sent[key] = time.monotonic()
    current_app.send_task(RUN_TASK, args=[str(run.pk)], queue=str(helix_settings.CELERY_QUEUE))
    return True


def _reap_never_started(now: datetime, report: ReapReport) -> None:
    """Queued runs no worker claimed a lease after they were recorded (their queue message was
    lost with a broker that restarted without persistence, or never sent): sent again, at most
    once per two leases; failed ``not_started`` past the run time limit. A run that was only
    waiting behind others gets a second message, which finds it claimed and does nothing."""
    lease = float(helix_settings.LEASE_SECONDS)
    limit = now - timedelta(seconds=float(helix_settings.RUN_TIME_LIMIT_SECONDS))
    waiting = Run.objects.filter(
        status=Run.Status.QUEUED, lease_expires_at__isnull=True, created_at__lt=now - timedelta(seconds=lease)
    )
    for run in waiting.only("id", "session_id", "epoch", "created_at"):
        if run.created_at < limit:
            error = "No worker picked the run up in time"
            if _close(run, "failed", error, RunErrorCode.NOT_STARTED, Q(status=Run.Status.QUEUED)):
                report.failed += 1
            continue
        if _send_again(run, every=2 * lease):
            report.dispatched += 1
            logger.warning("run %s is still queued: sent to the workers again", run.pk)


def _expire_pending_calls(now: datetime) -> int:
    """Deny the calls nobody answered in time; resume the runs left with no pending call."""
    expired = PendingCall.objects.filter(status=PendingCall.Status.PENDING, expires_at__lt=now)
    run_ids = set(expired.values_list("run_id", flat=True))
    count = expired.update(status=PendingCall.Status.EXPIRED, decided_at=now)
    # Also runs whose answers came in a while ago but which never went on (the resume was lost).
    stale = now - timedelta(seconds=3 * float(helix_settings.LEASE_SECONDS))
    answered = PendingCall.objects.filter(applied=False, decided_at__lt=stale).exclude(
        status=PendingCall.Status.PENDING
    )
    run_ids |= set(answered.values_list("run_id", flat=True))
    for run in Run.objects.filter(pk__in=run_ids, status=Run.Status.PAUSED):
        key = (str(run.pk), -run.epoch)  # one resume per pause
        if run_is_answered(str(run.pk)) and time.monotonic() - _sent.get(key, -1e9) > 3 * float(
            helix_settings.LEASE_SECONDS
        ):
            _sent[key] = time.monotonic()
            logger.warning("run %s: every paused call has its answer (or expired); the run goes on", run.pk)
            async_to_sync(resume_answered_run)(str(run.session_id), str(run.pk), run.agent)
    return count


def _close(
    run: Run,
    status: str,
    error: str,
    code: RunErrorCode = RunErrorCode.WORKER_LOST,
    still: Q | None = None,
) -> bool:
    """Record the end of a run whose worker is gone (or never came), if it is ``still`` so, then
    fence its stream and close it, as the run's: a stream open for another run by then (the
    session deleted meanwhile and created again, say) is left alone."""
    epoch = run.epoch + 1  # above the dead attempt's: nothing of it can land after this
    with transaction.atomic():
        leased = Q(lease_expires_at__isnull=False)  # by default: a run a worker held
        updated = Run.objects.filter(still or leased, pk=run.pk, epoch=run.epoch).update(
            status=status,
            epoch=epoch,
            lease_expires_at=None,
            finished_at=timezone.now(),
            error_code=code if status == "failed" else F("error_code"),
            error_message=error or F("error_message"),
        )
        if not updated:
            return False
        ChatSession.objects.filter(pk=run.session_id).update(
            status=ChatSession.Status.FAILED if status == "failed" else ChatSession.Status.IDLE
        )
    session_id, run_id = str(run.session_id), str(run.pk)

    async def close_stream() -> None:
        streams = get_stream_manager()
        try:
            await streams.fence(session_id, epoch, holder=run_id)
            writer = RunWriter(await streams.create_writer(session_id, run_id, epoch=epoch, holder=run_id))
            if status == "failed":
                recoverable = code != RunErrorCode.WORKER_LOST  # sending it again may well work
                await writer.emit(ErrorChunk, error=error, code=code, recoverable=recoverable, step=0)
                await streams.fail_stream(session_id, error, epoch=epoch, holder=run_id)
            else:
                await writer.emit(RunInterrupted, run_id=run_id, step=0, reason="user_stop")
                await streams.end_stream(session_id, epoch=epoch, holder=run_id)
        except StreamSupersededError as exc:  # a later run holds the stream: it is not this run's to close
            logger.info("run %s: its stream has moved on (%s); left as it is", run.pk, exc)
        except HelixError:
            logger.exception("could not close the stream of run %s", run.pk)
        finally:
            await streams.aclose()

    async_to_sync(close_stream)()
    return True
