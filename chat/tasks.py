"""The Celery task that executes a run: thin, like a view. It loads the run by id and hands it
to the runtime; the worker's shared event loop does the waiting."""

from __future__ import annotations

import asyncio
import logging

from celery import shared_task
from django.conf import settings

from chat.models import Run
from chat.store import DjangoStateStore
from streams.backends import get_stream_manager
from workers.executors import RUN_TASK, execute_run
from workers.loop import run_on_worker_loop
from workers.runtime.persistence import RunOutcome

logger = logging.getLogger(__name__)

SOFT_TIME_LIMIT = getattr(settings, "HELIX_RUN_SOFT_TIME_LIMIT", 1800)
TIME_LIMIT = SOFT_TIME_LIMIT + 60


async def _execute(run_id: str, session_id: str, agent: str, message_id: str) -> str:
    store, streams = DjangoStateStore(), get_stream_manager()
    try:
        outcome = await asyncio.wait_for(
            execute_run(store, streams, run_id, session_id, agent, message_id), SOFT_TIME_LIMIT
        )
    except TimeoutError:
        message = f"The run exceeded its time limit of {SOFT_TIME_LIMIT} s"
        await store.finish_run(run_id, RunOutcome("failed", error_code="time_limit_exceeded", error_message=message))
        await streams.fail_stream(session_id, message)
        return "failed"
    return outcome.status


@shared_task(  # type: ignore[untyped-decorator]
    name=RUN_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=SOFT_TIME_LIMIT,
    time_limit=TIME_LIMIT,
)
def run_agent(run_id: str) -> str:
    """Execute the run ``run_id`` if it is still queued; return its final status."""
    run = Run.objects.filter(pk=run_id).select_related("session").first()
    if run is None:
        logger.warning("run %s does not exist", run_id)
        return "missing"
    if run.status != Run.Status.QUEUED:
        logger.info("run %s is %s already: nothing to do", run_id, run.status)
        return str(run.status)
    return run_on_worker_loop(_execute(str(run.pk), str(run.session_id), run.agent, run.message_id), timeout=TIME_LIMIT)
