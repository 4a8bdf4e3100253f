"""A session's feed: what each tab of a session hears about the session's runs.

``GET <prefix>/chat/<session>/feed`` is one server-sent event stream per tab, for as long as the
tab is open, whichever runs come and go. It sends a ``run`` event when it opens and then whenever
the session's run changes hands or state: a run starts (in another tab, on another device, from
the API), pauses on a person, goes on after an answer given elsewhere, ends or fails::

    event: run
    data: {"status": "active", "runId": "…", "streamSequence": 42}

``status`` is the stream's (``active``, ``paused``, ``ended``, ``failed``; ``none`` before the
session's first run). Tokens are not in the feed: a tab that hears of a run it does not show
loads the snapshot and resumes the run's stream, as after a reload. Between events the feed sends
a keep-alive comment.

The feed reads the stream's state (one small read in the store), never its chunks: it wakes on
the store's change notifications for the stream, reads at most once per
:data:`COALESCE_SECONDS` however fast a run writes, and reads again every
:data:`RECHECK_SECONDS` in case a notification was lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from streams.backends.base import StreamManager
from streams.exceptions import StreamUnavailableError
from streams.sse import KEEP_ALIVE, encode_event

__all__ = ["COALESCE_SECONDS", "RECHECK_SECONDS", "session_feed"]

#: The shortest time between two reads of a stream's state: a run writes many chunks a second.
COALESCE_SECONDS = 0.1
#: The longest time between two reads: notifications can be lost while the store reconnects.
RECHECK_SECONDS = 15.0


async def _states(streams: StreamManager, session_id: str, keep_alive: float) -> AsyncIterator[bytes]:
    """One coroutine per feed, no task of its own: it waits on the subscription with one timer,
    whichever comes first of a recheck and a keep-alive."""
    subscription = streams.watch(session_id)
    loop = asyncio.get_running_loop()
    try:
        await subscription.ready()
        shown: tuple[str, str | None] | None = None
        said = loop.time()  # when the feed last sent anything
        while True:
            try:
                info = await streams.get_stream_info(session_id)
            except StreamUnavailableError:
                pass  # the store is away: nothing to say until it answers again
            else:
                state = (info.status, info.holder) if info is not None else ("none", None)
                if state != shown:
                    shown = state
                    sequence = info.latest_sequence if info is not None else 0
                    yield encode_event({"status": state[0], "runId": state[1], "streamSequence": sequence}, event="run")
                    said = loop.time()
            wait = min(RECHECK_SECONDS, max(said + keep_alive - loop.time(), 0.0))
            try:
                async with asyncio.timeout(wait):
                    await subscription.wait()
            except TimeoutError:
                if loop.time() - said >= keep_alive:
                    yield KEEP_ALIVE
                    said = loop.time()
                continue  # nothing changed that it heard of: read the state again (a recheck)
            await asyncio.sleep(COALESCE_SECONDS)
    finally:
        subscription.close()


def session_feed(streams: StreamManager, session_id: str, *, keep_alive: float) -> AsyncIterator[bytes]:
    """The feed of ``session_id`` as SSE bytes, with a keep-alive comment after ``keep_alive``
    seconds without an event. A store that cannot be reached sends nothing until it can."""
    return _states(streams, session_id, keep_alive)
