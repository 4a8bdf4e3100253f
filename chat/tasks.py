"""Celery tasks: executing a run (thin, like a view) and reaping runs whose worker died.

``helix.run_agent`` claims the run for an attempt and hands it to the runtime on the worker's
shared event loop; a redelivered or duplicate message finds the run held and does nothing.
``helix.reap_runs`` (Celery beat, every ``HELIX["REAP_INTERVAL_SECONDS"]``) sends the runs whose
lease expired to a live worker. On a clean shutdown a worker hands its runs back first.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from celery import Task, shared_task
from celery.signals import worker_ready, worker_shutting_down

from chat.state.store import DjangoStateStore
from streams.backends import get_stream_manager
from streams.conf import helix_settings
from workers.attempts import execute_run
from workers.event_loop import run_on_worker_loop
from workers.executors import RUN_TASK
from workers.leases import LeaseKeeper, lease_keeper
from workers.presence import broker_presence

logger = logging.getLogger(__name__)

REAP_TASK = "helix.reap_runs"
#: Seconds a worker is given, past a run's own time limit, to write its failure before Celery's
#: hard limit kills the task.
HARD_LIMIT_MARGIN = 60


def run_time_limit() -> int:
    return int(helix_settings.RUN_TIME_LIMIT_SECONDS)


class HelixTask(Task):  # type: ignore[misc]
    """Helix's tasks read their queue and time limits from the site's settings when Celery uses
    them (sending a task, starting a worker), never when this module is imported."""

    @property
    def queue(self) -> str:
        return str(helix_settings.CELERY_QUEUE)


_keepers: dict[asyncio.AbstractEventLoop, LeaseKeeper] = {}


def _keeper() -> LeaseKeeper:
    loop = asyncio.get_running_loop()
    if loop not in _keepers:
        _keepers[loop] = lease_keeper(DjangoStateStore(), get_stream_manager())
    return _keepers[loop]


async def _execute(run_id: str) -> str:
    store, streams = DjangoStateStore(), get_stream_manager()
    # The attempt enforces the time limit itself: its failure is written under its fencing epoch.
    attempt = asyncio.ensure_future(execute_run(store, streams, run_id, _keeper(), time_limit=run_time_limit()))
    try:
        outcome = await asyncio.shield(attempt)
    except asyncio.CancelledError:
        if attempt.cancelled() and not _current_cancelling():
            return "superseded"  # our lease went to another worker, or we handed the run back
        raise
    return outcome.status if outcome is not None else "skipped"


def _current_cancelling() -> bool:
    task = asyncio.current_task()
    return bool(task is not None and task.cancelling())


class RunTask(HelixTask):
    @property
    def soft_time_limit(self) -> int:
        return run_time_limit()

    @property
    def time_limit(self) -> int:
        return run_time_limit() + HARD_LIMIT_MARGIN


@shared_task(base=RunTask, name=RUN_TASK, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
def run_agent(run_id: str) -> str:
    """Claim ``run_id`` and execute it; return its final status, or ``skipped`` when the run was
    not claimable (finished, paused, or held by a live attempt)."""
    return run_on_worker_loop(_execute(run_id), timeout=run_time_limit() + HARD_LIMIT_MARGIN)


@shared_task(base=HelixTask, name=REAP_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
def reap_runs() -> dict[str, int]:
    """Send runs whose lease expired to a live worker; fail those out of attempts."""
    from chat.state.recovery import reap_expired_runs

    return reap_expired_runs().as_dict()


@worker_shutting_down.connect  # type: ignore[untyped-decorator]
def _hand_back_runs(**_: Any) -> None:
    """A clean shutdown (SIGTERM): queue this worker's runs again for the others, no attempt lost."""
    from celery import current_app

    for loop, keeper in list(_keepers.items()):
        if loop.is_closed() or not keeper.run_ids:
            continue
        handed = asyncio.run_coroutine_threadsafe(keeper.hand_back(), loop).result(timeout=30)
        for run_id in handed:
            current_app.send_task(RUN_TASK, args=[run_id], queue=str(helix_settings.CELERY_QUEUE))
        logger.warning("handed back %d runs on shutdown", len(handed))


#: This worker's presence on Helix's queue: stopped (and withdrawn) when it shuts down.
_presence: list[tuple[Any, list[str], str, Any]] = []


@worker_ready.connect  # type: ignore[untyped-decorator]
def _announce(sender: Any, **_: Any) -> None:
    """Say, every few seconds, that this worker consumes Helix's queue (if it does), so that web
    processes know a run sent there will be taken (:mod:`workers.presence`)."""
    app = sender.app
    queue = str(helix_settings.CELERY_QUEUE)
    consumed = set(app.amqp.queues.consume_from or ())
    if queue not in consumed:
        logger.warning(
            "this worker does not consume Helix's queue %r (it consumes %s): chats need a worker started with -Q %s",
            queue,
            ", ".join(sorted(consumed)) or "nothing",
            queue,
        )
        return
    presence = broker_presence(str(app.conf.broker_url or ""))
    if presence is not None:
        stop = presence.keep_announcing([queue], sender.hostname)
        _presence.append((presence, [queue], sender.hostname, stop))


@worker_shutting_down.connect  # type: ignore[untyped-decorator]
def _withdraw(**_: Any) -> None:
    for presence, queues, worker, stop in _presence:
        stop.set()
        try:
            presence.withdraw(queues, worker)
        except Exception as exc:  # the broker is away: the entry lapses by itself
            logger.warning("could not withdraw worker %s: %s", worker, exc)
