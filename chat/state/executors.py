"""The process's executor (``HELIX["EXECUTOR"]``: ``inprocess`` or ``celery``) over the Django
state store and the configured stream store, and what the state layer asks of it: resuming a run
whose paused calls all have their answers (the reaper, the admin)."""

from __future__ import annotations

from django.core.signals import setting_changed

from chat.state.store import DjangoStateStore
from streams.backends import get_stream_manager
from streams.conf import helix_settings
from workers.executors import CeleryExecutor, Executor, InProcessExecutor
from workers.presence import broker_presence

__all__ = ["get_executor", "resume_answered_run"]

_executors: dict[str, Executor] = {}


def get_executor() -> Executor:
    """The configured executor over the Django state store and the configured stream store."""
    kind = helix_settings.EXECUTOR
    executor = _executors.get(kind)
    if executor is None:
        store, streams = DjangoStateStore(), get_stream_manager()
        if kind == "celery":
            from celery import current_app

            presence = broker_presence(str(current_app.conf.broker_url or ""))
            executor = CeleryExecutor(store, streams, queue=str(helix_settings.CELERY_QUEUE), presence=presence)
        else:
            executor = InProcessExecutor(store, streams)
        _executors[kind] = executor
    return executor


async def resume_answered_run(session_id: str, run_id: str, agent: str) -> None:
    """Reopen the paused stream and send the run to a worker: its calls all have answers. A
    stream open for another run by now (the session deleted and created again) is refused."""
    await get_stream_manager().resume_stream(session_id, holder=run_id)
    await get_executor().resume(run_id, agent)


def _reset(*, setting: str, **kwargs: object) -> None:
    if setting == "HELIX":
        _executors.clear()


setting_changed.connect(_reset)
