"""A cap on the streams one caller holds open in a web process.

Every open stream costs the process memory (its reader's page, its socket buffer) for as long as
the client keeps it open, so one user with many tabs, or a script, could make a process hold
without bound. :func:`admit` takes one of the caller's ``HELIX["MAX_STREAMS_PER_CALLER"]`` places
at once, before a POST stores anything, or refuses with ``429 TOO_MANY_STREAMS``; the place is
the stream's until its body ends (:class:`CountedBody`), and is given back at once when the
answer is not a stream. Checking and taking are one step on the event loop, so concurrent
requests of one caller cannot all pass. The cap is per process, as the memory it protects is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from chat.exceptions import TooManyStreamsError
from chat.http.access import Caller
from streams.conf import helix_settings

__all__ = ["CountedBody", "Place", "admit", "caller_key"]

_open: Counter[str] = Counter()


def caller_key(caller: Caller) -> str:
    """Who the cap counts: the user, or an anonymous visitor's address (a visitor can make itself
    a new Django session with every request, but not a new address)."""
    if caller.user_id is not None:
        return f"user:{caller.user_id}"
    return f"visitor:{caller.request.META.get('REMOTE_ADDR', '')}"


class Place:
    """One of a caller's open-stream places, held until :meth:`release` (or until it is dropped)."""

    def __init__(self, key: str) -> None:
        self.key: str | None = key

    def release(self) -> None:
        key, self.key = self.key, None
        if key is not None:
            _open[key] -= 1
            if _open[key] <= 0:
                del _open[key]

    def __del__(self) -> None:  # a request cancelled between admit() and its body's first byte
        self.release()


def admit(key: str) -> Place:
    """Take one of ``key``'s places, or raise :class:`~chat.exceptions.TooManyStreamsError`."""
    limit = int(helix_settings.MAX_STREAMS_PER_CALLER)
    if _open[key] >= limit:
        raise TooManyStreamsError(f"You already have {limit} streams open; close one and try again")
    _open[key] += 1
    return Place(key)


class CountedBody:
    """A stream's body holding its caller's place until it ends, is closed, or is dropped.

    Django closes a streaming response's body with ``close()`` once it is sent (and the ASGI
    handler with ``aclose()`` when its client leaves): either gives the place back."""

    def __init__(self, place: Place, body: AsyncIterator[bytes]) -> None:
        self.place, self.body = place, body

    def __aiter__(self) -> CountedBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self.body.__anext__()
        except BaseException:
            self.place.release()
            raise

    async def aclose(self) -> None:
        self.place.release()
        aclose: Any = getattr(self.body, "aclose", None)
        if aclose is not None:
            await aclose()

    def close(self) -> None:
        self.place.release()
