"""A resume's first page, read while the request is authenticated.

A resume makes two waits in a row: a database hop (who the caller is, whether it owns the session,
the session's current run) and a Redis read of the stream's first page from the resume position.
When the client names its position (``Last-Event-ID``, as a reconnecting ``EventSource`` does),
where that page starts is known before the database says anything, unless the current run started
after that position; so the page is read while the database hop runs, and used only if the
request is then allowed and the run's start agrees. Nothing read ahead reaches a client that the
pipeline refused: the page is dropped.

The resume views read ahead only for a request that carries credentials (an ``Authorization``
header or a session cookie), so a client with none cannot make the server read pages it will
never be allowed to see.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from streams.backends.base import StreamManager
from streams.backends.records import ReadPage

__all__ = ["PageAhead"]


class PageAhead:
    """The first page of ``session_id`` from ``position``, being read."""

    def __init__(self, streams: StreamManager, session_id: str, position: int) -> None:
        self.session_id, self.position = session_id, position
        self._task: asyncio.Task[ReadPage | None] = asyncio.ensure_future(streams.first_page(session_id, position))
        self._task.add_done_callback(_retrieve)

    async def take(self, session_id: str, start: int) -> ReadPage | None:
        """The page, if it is the one a reader of ``session_id`` from ``start`` needs and it was
        read; else ``None`` (the caller reads the page itself, and sees any error for itself)."""
        if session_id != self.session_id or start != self.position:
            self.cancel()
            return None
        task = self._task
        with contextlib.suppress(Exception):
            # Read already (the database hop took longer): no shield, and no turn of the loop.
            return task.result() if task.done() else await asyncio.shield(task)
        return None

    def cancel(self) -> None:
        """Drop the read (a refused request, or a page no one needs); harmless once taken."""
        self._task.cancel()


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # a failed read ahead is no news: whoever needs the page reads it again
