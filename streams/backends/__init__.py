"""Stream store backends and the per-process manager chosen by ``HELIX["STREAMS"]``.

``get_stream_manager()`` returns the process's single configured manager (so one Redis tail and
one connection pool serve every stream of the process); nothing else should instantiate a
backend from settings. Both backends are importable from here.
"""

from __future__ import annotations

import threading
from typing import Any

from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from streams.backends.base import StreamManager
from streams.backends.buffered import BufferedStreamWriter
from streams.backends.memory import InMemoryStreamManager
from streams.backends.readers import ResumableStreamReader, StreamReader
from streams.backends.records import StreamInfo, StreamStatus
from streams.backends.redis import RedisStreamManager
from streams.backends.writers import StreamWriter
from streams.exceptions import ConfigurationError

__all__ = [
    "BufferedStreamWriter",
    "InMemoryStreamManager",
    "RedisStreamManager",
    "ResumableStreamReader",
    "StreamInfo",
    "StreamManager",
    "StreamReader",
    "StreamStatus",
    "StreamWriter",
    "backend_class",
    "create_stream_manager",
    "get_stream_manager",
]

_lock = threading.Lock()
_manager: StreamManager | None = None


def backend_class(name: str) -> type[StreamManager]:
    """The backend class for an alias (``memory``, ``redis``) or a dotted path."""
    from streams.conf import BACKEND_ALIASES

    path = BACKEND_ALIASES.get(name, name)
    try:
        cls = import_string(path)
    except ImportError as exc:
        raise ConfigurationError(f"Cannot import stream backend {name!r}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, StreamManager)):
        raise ConfigurationError(f"Stream backend {name!r} is not a StreamManager subclass")
    return cls


def create_stream_manager(backend: str, options: dict[str, Any] | None = None) -> StreamManager:
    """A new manager of ``backend`` built with ``options``."""
    cls = backend_class(backend)
    try:
        return cls(**(options or {}))
    except TypeError as exc:
        raise ConfigurationError(f"Bad options for stream backend {backend!r}: {exc}") from exc


def get_stream_manager() -> StreamManager:
    """The stream manager configured in ``HELIX["STREAMS"]``, created once per process."""
    global _manager
    if _manager is None:
        from streams.conf import helix_settings

        with _lock:
            if _manager is None:
                config = helix_settings.STREAMS
                _manager = create_stream_manager(config["BACKEND"], config.get("OPTIONS"))
    return _manager


def _reset(*, setting: str, **kwargs: Any) -> None:
    global _manager
    if setting == "HELIX":
        _manager = None


setting_changed.connect(_reset)
