"""The process's frontend handler, built from the Helix settings over the process's executor
(:mod:`chat.state.executors`)."""

from __future__ import annotations

from django.core.signals import setting_changed

from chat.http.double_texting import DoubleTexting
from chat.http.handler import FrontendHandler, create_frontend_handler
from chat.http.parsing import Limits
from chat.state.approvals import decide
from chat.state.executors import get_executor
from chat.state.store import DjangoStateStore
from streams.backends import get_stream_manager
from streams.conf import helix_settings

__all__ = ["get_handler"]

_handlers: dict[str, FrontendHandler] = {}


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


def _reset(*, setting: str, **kwargs: object) -> None:
    if setting == "HELIX":
        _handlers.clear()


setting_changed.connect(_reset)
