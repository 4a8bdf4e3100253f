"""The process's executor (``HELIX["EXECUTOR"]``: ``inprocess`` or ``celery``) and frontend handler,
and what needs them both: resuming a run whose paused calls all have their answers."""

from __future__ import annotations

from django.core.signals import setting_changed

from chat.http.double_texting import DoubleTexting
from chat.http.handler import FrontendHandler, create_frontend_handler
from chat.http.parsing import Limits
from chat.state.approvals import decide
from chat.state.store import DjangoStateStore
from streams.backends import get_stream_manager
from streams.conf import helix_settings
from workers.executors import CeleryExecutor, Executor, InProcessExecutor

__all__ = ["get_executor", "get_handler", "resume_answered_run"]

_executors: dict[str, Executor] = {}
_handlers: dict[str, FrontendHandler] = {}


def get_executor() -> Executor:
    """The configured executor over the Django state store and the configured stream store."""
    kind = helix_settings.EXECUTOR
    executor = _executors.get(kind)
    if executor is None:
        store, streams = DjangoStateStore(), get_stream_manager()
        if kind == "celery":
            executor = CeleryExecutor(store, streams, queue=str(helix_settings.CELERY_QUEUE))
        else:
            executor = InProcessExecutor(store, streams)
        _executors[kind] = executor
    return executor


def get_handler() -> FrontendHandler:
    """The frontend handler of the process, built from the Helix settings."""
    kind = helix_settings.EXECUTOR
    handler = _handlers.get(kind)
    if handler is None:
        limits = Limits(int(helix_settings.MAX_MESSAGE_CHARS), int(helix_settings.MAX_MESSAGES))
        handler = create_frontend_handler(
            get_executor(),
            get_stream_manager(),
            DjangoStateStore(),
            agent=helix_settings.DEFAULT_AGENT,
            content_replay=bool(helix_settings.CONTENT_REPLAY),
            limits=limits,
            keep_alive=float(helix_settings.SSE_KEEPALIVE_SECONDS),
            decide=decide,
            double_texting=DoubleTexting(
                str(helix_settings.DOUBLE_TEXTING),
                wait_seconds=float(helix_settings.DOUBLE_TEXTING_WAIT_SECONDS),
                stop=DjangoStateStore().request_stop,
            ),
        )
        _handlers[kind] = handler
    return handler


async def resume_answered_run(session_id: str, run_id: str, agent: str) -> None:
    """Reopen the paused stream and send the run to a worker: its calls all have answers."""
    await get_stream_manager().resume_stream(session_id)
    await get_executor().resume(run_id, agent)


def _reset(*, setting: str, **kwargs: object) -> None:
    if setting == "HELIX":
        _executors.clear()
        _handlers.clear()


setting_changed.connect(_reset)
