"""One asyncio event loop per worker process, shared by all the runs it executes.

Celery tasks are sync; a run is mostly waiting (on the model, on Redis). Running each task's run
on this shared loop lets a ``--pool threads`` worker hold many runs at once with one Redis
connection pool and one stream tail, instead of a process or an event loop per run.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_on_worker_loop"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _worker_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="helix-worker-loop", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def run_on_worker_loop(coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coroutine`` on the process's shared loop and wait for it from this thread."""
    future = asyncio.run_coroutine_threadsafe(coroutine, _worker_loop())
    try:
        return future.result(timeout)
    except TimeoutError:
        future.cancel()
        raise
