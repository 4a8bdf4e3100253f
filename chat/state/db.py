"""Database work off the request thread: a small pool of worker threads, each with its own
connection, and connection hygiene around every call.

Django gives each ASGI request a thread for thread-sensitive calls and keeps it until the
request ends; for a stream that is open for minutes, that would be a thread per stream. Each
call made through :func:`db` is one self-contained unit (a transaction at most), so any thread
of the pool will do. This is ``sync_to_async(thread_sensitive=False)`` without its per-call
bookkeeping, which a reconnect storm of thousands of resumes feels.

A pool thread outlives requests, so Django's request signals never tidy its connection: like
``channels.db.database_sync_to_async``, every call closes the thread's connection before and
after when it is unusable or past ``CONN_MAX_AGE`` (with ``CONN_HEALTH_CHECKS`` a kept
connection is also checked once per call). After a PostgreSQL restart or failover the next call
opens a fresh connection instead of failing until the process restarts; while the server is
still coming back (connections refused), a call waits up to :data:`CONNECT_PATIENCE` seconds
for it before it raises. A call whose connection dies under it is run once more on a fresh
connection (its transaction died with the connection); a call made inside an outer transaction
is never retried. A call the database still fails (down past that patience, or stalled past its
own timeouts, such as SQLite's lock ``timeout`` or PostgreSQL's ``statement_timeout``) raises
:class:`~workers.exceptions.DatabaseUnavailableError`, which callers and clients can handle; the
driver's error is logged, and chained as its cause.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from django.db import InterfaceError, OperationalError, close_old_connections, connections

from streams.backoff import Backoff
from workers.exceptions import DatabaseUnavailableError

__all__ = ["db"]

P = ParamSpec("P")
T = TypeVar("T")

logger = logging.getLogger("helix.db")

#: How long a call waits for the database to accept connections again (a restart, a failover).
CONNECT_PATIENCE = 10.0

_DB_THREADS = ThreadPoolExecutor(max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="helix-db")


def _connect() -> None:
    """Open the default connection now, waiting while the server refuses connections."""
    connection = connections["default"]
    connection.close_if_health_check_failed()  # CONN_HEALTH_CHECKS: once per call, as per request
    backoff = Backoff(timeout=CONNECT_PATIENCE)
    while True:
        try:
            connection.ensure_connection()
            return
        except OperationalError:
            connection.close()
            if not backoff.wait_sync():
                raise


def _tidy(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    for attempt in (1, 2):
        close_old_connections()
        _connect()
        try:
            return function(*args, **kwargs)
        except (OperationalError, InterfaceError):
            # The server went away under the call (a restart, a failover): its transaction, if
            # any, was rolled back with the connection, so the unit is run once more on a new one.
            connection = connections["default"]
            if attempt == 2 or connection.in_atomic_block or connection.is_usable():
                raise
            logger.warning("the database connection was lost during %s: retrying once", function.__qualname__)
            connection.close()
        finally:
            close_old_connections()
    raise AssertionError("unreachable")


def db(function: Callable[P, T]) -> Callable[P, Awaitable[T]]:
    """``function`` run in a database worker thread, with stale connections closed around it."""

    async def call(*args: P.args, **kwargs: P.kwargs) -> T:
        context = contextvars.copy_context()
        work = functools.partial(context.run, _tidy, function, *args, **kwargs)
        try:
            result: T = await asyncio.get_running_loop().run_in_executor(_DB_THREADS, work)
        except (OperationalError, InterfaceError) as exc:
            logger.warning("the database failed %s: %s: %s", function.__qualname__, type(exc).__name__, exc)
            raise DatabaseUnavailableError() from exc
        return result

    return call
