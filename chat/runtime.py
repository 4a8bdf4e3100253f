"""The process's executor, chosen by ``HELIX["EXECUTOR"]`` (``inprocess`` or ``celery``)."""

from __future__ import annotations

from django.conf import settings

from chat.store import DjangoStateStore
from streams.backends import get_stream_manager
from streams.conf import helix_settings
from workers.executors import CeleryExecutor, Executor, InProcessExecutor

__all__ = ["get_executor"]

_executors: dict[str, Executor] = {}


def get_executor() -> Executor:
    """The configured executor over the Django state store and the configured stream store."""
    kind = helix_settings.EXECUTOR
    executor = _executors.get(kind)
    if executor is None:
        store, streams = DjangoStateStore(), get_stream_manager()
        if kind == "celery":
            executor = CeleryExecutor(store, streams, queue=getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None))
        else:
            executor = InProcessExecutor(store, streams)
        _executors[kind] = executor
    return executor
