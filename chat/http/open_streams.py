"""A cap on the streams one caller holds open in a web process.

Every open stream costs the process memory (its reader's page, its socket buffer) for as long as
the client keeps it open, so one user with many tabs, or a script, could make a process hold
without bound. :func:`admit` refuses a caller already holding ``HELIX["MAX_STREAMS_PER_CALLER"]``
streams here with ``429 TOO_MANY_STREAMS`` (checked before a POST stores anything), and
:func:`counted` keeps the count while a stream's body runs. The cap is per process, as the memory
it protects is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

from chat.exceptions import TooManyStreamsError
from chat.http.access import Caller
from streams.conf import helix_settings

__all__ = ["admit", "caller_key", "counted", "user_key"]

_open: Counter[str] = Counter()


def caller_key(caller: Caller) -> str:
    """Who the cap counts: the user, or the anonymous visitor's session (else its address)."""
    if caller.user_id is not None:
        return user_key(caller.user_id)
    session = getattr(caller.request, "session", None)
    key = getattr(session, "session_key", None) or caller.request.META.get("REMOTE_ADDR", "")
    return f"visitor:{key}"


def user_key(user_id: object) -> str:
    """The key the cap counts an authenticated user's streams by."""
    return f"user:{user_id}"


def admit(key: str) -> None:
    """Raise :class:`~chat.exceptions.TooManyStreamsError` if ``key`` holds the most streams it may."""
    limit = int(helix_settings.MAX_STREAMS_PER_CALLER)
    if _open[key] >= limit:
        raise TooManyStreamsError(f"You already have {limit} streams open; close one and try again")


async def counted(key: str, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``body``, counted as one open stream of ``key`` from its first byte to its end."""
    _open[key] += 1
    try:
        async for part in body:
            yield part
    finally:
        _open[key] -= 1
        if _open[key] <= 0:
            del _open[key]
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            await aclose()
