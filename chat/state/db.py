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

:func:`together` is for the many small calls of a moment, such as the pipelines of a storm of
reconnecting streams: the calls made in one turn of the event loop run one after another in one
hop to a database thread, each retried as :func:`db` would retry it, with the connection tidied
around the hop (and again after a call that failed) and their compiled reads shared and read
ahead together (:func:`~chat.state.compiled.shared_reads`). A thousand resumes then cost tens of
hops, tens of token reads, tens of run reads and tens of connection checks, not a thousand of each.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from django.db import InterfaceError, OperationalError, close_old_connections, connections, router

from chat.state.compiled import shared_reads
from streams.backoff import Backoff
from workers.exceptions import DatabaseUnavailableError

__all__ = ["MOST_PER_HOP", "ReadAhead", "db", "together"]

P = ParamSpec("P")
T = TypeVar("T")

logger = logging.getLogger("helix.db")

#: How long a call waits for the database to accept connections again (a restart, a failover).
CONNECT_PATIENCE = 10.0

_DB_THREADS = ThreadPoolExecutor(max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="helix-db")


@functools.cache
def _aliases() -> tuple[str, ...]:
    """The databases the calls read from and write to, as the site's routers route Helix's models
    and the user model (a site may send reads to a replica): the connections each call checks and
    opens. Decided once; tests that change the routers clear it."""
    from django.apps import apps
    from django.contrib.auth import get_user_model

    models = [model for model in apps.get_app_config("helix_chat").get_models()]
    models.append(get_user_model())
    found: list[str] = []
    for model in models:
        for alias in (router.db_for_read(model), router.db_for_write(model)):
            if alias not in found:
                found.append(alias)
    return tuple(found)


def _connect() -> None:
    """Open the connections the calls use now, waiting while a server refuses connections."""
    for alias in _aliases():
        connection = connections[alias]
        connection.close_if_health_check_failed()  # CONN_HEALTH_CHECKS: once per call, as per request
        backoff = Backoff(timeout=CONNECT_PATIENCE)
        while True:
            try:
                connection.ensure_connection()
                break
            except OperationalError:
                connection.close()
                if not backoff.wait_sync():
                    raise


def _retrying(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function`` on the thread's connection (opened by :func:`_connect`), run once more on a
    fresh one if the server went away under it."""
    for attempt in (1, 2):
        try:
            return function(*args, **kwargs)
        except (OperationalError, InterfaceError):
            # The server went away under the call (a restart, a failover): its transaction, if
            # any, was rolled back with the connection, so the unit is run once more on a new one.
            used = [connections[alias] for alias in _aliases()]
            lost = [connection for connection in used if not connection.is_usable()]
            if attempt == 2 or any(connection.in_atomic_block for connection in used) or not lost:
                raise
            logger.warning("the database connection was lost during %s: retrying once", function.__qualname__)
            for connection in lost:
                connection.close()
            _connect()
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _tidied() -> Iterator[None]:
    """The thread's connection closed if unusable or old, and opened, before the block; closed if
    the block left it unusable, after."""
    close_old_connections()
    try:
        _connect()
        yield
    finally:
        close_old_connections()


def _tidy(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with _tidied():
        return _retrying(function, *args, **kwargs)


def db(function: Callable[P, T]) -> Callable[P, Awaitable[T]]:
    """``function`` run in a database worker thread, with stale connections closed around it."""

    async def call(*args: P.args, **kwargs: P.kwargs) -> T:
        context = contextvars.copy_context()
        work = functools.partial(context.run, _tidy, function, *args, **kwargs)
        try:
            result: T = await asyncio.get_running_loop().run_in_executor(_DB_THREADS, work)
        except (OperationalError, InterfaceError) as exc:
            raise _unavailable(function, exc) from exc
        return result

    return call


def _unavailable(function: Callable[..., Any], exc: BaseException) -> DatabaseUnavailableError:
    name = getattr(function, "__qualname__", None) or getattr(getattr(function, "func", None), "__qualname__", "a call")
    logger.warning("the database failed %s: %s: %s", name, type(exc).__name__, exc)
    return DatabaseUnavailableError()


# -- calls of a moment, together ------------------------------------------------------------------

#: The most calls one hop runs: a batch this long answers its last call a few milliseconds later.
MOST_PER_HOP = 64


@dataclass(frozen=True)
class ReadAhead:
    """What a call of :func:`together` will read, to be read with the same of the other calls
    of its hop: ``read(keys)`` (on the database thread, inside
    :func:`~chat.state.compiled.shared_reads`) reads for every key at once and remembers the rows."""

    read: Callable[[list[Any]], None]
    key: Hashable


@dataclass
class _Call:
    work: Callable[[], Any]
    context: contextvars.Context
    aheads: tuple[ReadAhead, ...]
    future: asyncio.Future[Any]


_open: dict[asyncio.AbstractEventLoop, list[_Call]] = {}


async def together(work: Callable[[], T], *aheads: ReadAhead) -> T:
    """``work()`` on a database thread, as :func:`db` runs it, in one hop with the other calls
    made in this turn of the event loop (at most :data:`MOST_PER_HOP`); each call's result and
    error are its own. ``aheads``: what it will read, to be read with the other calls' at once."""
    loop = asyncio.get_running_loop()
    calls = _open.get(loop)
    if calls is None or len(calls) >= MOST_PER_HOP:
        calls = _open[loop] = []
        loop.call_soon(_hop, loop, calls)
    call = _Call(work, contextvars.copy_context(), aheads, loop.create_future())
    calls.append(call)
    try:
        result: T = await call.future
    except (OperationalError, InterfaceError) as exc:
        raise _unavailable(work, exc) from exc
    return result


def _hop(loop: asyncio.AbstractEventLoop, calls: list[_Call]) -> None:
    if _open.get(loop) is calls:
        del _open[loop]
    try:
        _DB_THREADS.submit(_run_and_answer, loop, calls)
    except RuntimeError as exc:  # the pool is shut down: the interpreter is exiting
        _answer(calls, [(False, exc)] * len(calls))


def _run_and_answer(loop: asyncio.AbstractEventLoop, calls: list[_Call]) -> None:
    """The hop on its database thread; its outcomes handed back to the loop in one callback.
    (``run_in_executor`` would take two more turns of the loop: its future's state copied over
    by one callback, then the callbacks of that future by another.)"""
    try:
        outcomes = _run_together(calls)
    except BaseException as exc:  # the hop itself failed: every call with it
        outcomes = [(False, exc)] * len(calls)
    try:
        loop.call_soon_threadsafe(_answer, calls, outcomes)
    except RuntimeError:  # the loop closed meanwhile: no one is waiting
        pass


def _run_together(calls: list[_Call]) -> list[tuple[bool, Any]]:
    """The calls of a hop one after another, tidied around the hop as :func:`db` tidies around
    one call (a thousand resumes are thousands of calls), and again after a call that failed."""
    outcomes: list[tuple[bool, Any]] = []
    # A database down past its patience fails the whole hop here, before any call has run.
    with _tidied(), shared_reads():
        failed = _read_ahead(calls)
        down: Exception | None = None
        for call in calls:
            error = down or next((failed[a.read] for a in call.aheads if a.read in failed), None)
            if error is not None:
                outcomes.append((False, error))
                continue
            try:
                outcomes.append((True, call.context.run(_retrying, call.work)))
            except BaseException as exc:  # the call's own error, raised in its caller
                outcomes.append((False, exc))
                down = _reconnect()
    return outcomes


def _reconnect() -> Exception | None:
    """After a call failed, as :func:`db` does after any call: the connection closed if that left
    it unusable, and opened again; the database's error if it cannot be (the calls left fail with
    it rather than each waiting as long again)."""
    close_old_connections()
    try:
        _connect()
    except (OperationalError, InterfaceError) as exc:
        return exc
    return None


def _read_ahead(calls: list[_Call]) -> dict[Callable[[list[Any]], None], Exception]:
    """The reads the calls of a hop declared, each made once for all their keys; the reads the
    database failed, with their errors."""
    keys: dict[Callable[[list[Any]], None], list[Any]] = {}
    for call in calls:
        for ahead in call.aheads:
            keys.setdefault(ahead.read, []).append(ahead.key)
    failed: dict[Callable[[list[Any]], None], Exception] = {}
    for read, wanted in keys.items():
        distinct = list(dict.fromkeys(wanted))
        if len(distinct) < 2:  # one key: its first call's read is shared (cheaper than a read for many)
            continue
        try:
            _retrying(read, distinct)
        except (OperationalError, InterfaceError) as exc:
            # The database is down or stalled: the calls that wanted the read fail with it now,
            # rather than each waiting for the same stall once more.
            failed[read] = exc
        except Exception:  # a bug in the read: each call reads for itself
            logger.exception("reading ahead for %d keys failed", len(distinct))
    return failed


def _answer(calls: list[_Call], outcomes: list[tuple[bool, Any]]) -> None:
    for call, (ok, value) in zip(calls, outcomes, strict=True):
        if call.future.done():  # its caller went away (a client that disconnected)
            continue
        if ok:
            call.future.set_result(value)
        elif isinstance(value, StopIteration):
            # A future refuses StopIteration (TypeError), which would strand this hop's other
            # callers: it reaches its caller as a coroutine's would, as a RuntimeError.
            error = RuntimeError(f"a database call raised StopIteration: {value!r}")
            error.__cause__ = value
            call.future.set_exception(error)
        else:
            call.future.set_exception(value)
