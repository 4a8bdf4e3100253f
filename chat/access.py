"""Who may touch which session: owners, tokens, anonymous mode, limits and rate limits.

A session belongs to its owner; any other caller gets a 404 for it, as if it did not exist. In
anonymous mode (``HELIX["ALLOW_ANONYMOUS"]``, env ``HELIX_ALLOW_ANONYMOUS=1``) a visitor without
an account owns the sessions it created, remembered in its Django session.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from django.core.cache import cache
from django.http import HttpRequest

from chat.models import Session
from chat.store import db
from streams.conf import helix_settings
from streams.exceptions import HelixError

__all__ = [
    "Caller",
    "NotFoundError",
    "RateLimitedError",
    "UnauthorizedError",
    "authorize",
    "caller_of",
    "check_rate_limit",
    "session_access",
]

ANONYMOUS_KEY = "helix_sessions"


class NotFoundError(HelixError):
    """No such session."""

    code = "SESSION_NOT_FOUND"
    status_code = 404


class UnauthorizedError(HelixError):
    """Authentication required."""

    code = "NOT_AUTHENTICATED"
    status_code = 401


class RateLimitedError(HelixError):
    """Too many requests."""

    code = "RATE_LIMITED"
    status_code = 429

    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(f"Too many chat requests; retry in {retry_after} s")


@dataclass
class Caller:
    """The authenticated user (``user_id``), or an anonymous visitor with the sessions it owns."""

    user_id: int | None
    via_token: bool
    anonymous_sessions: list[str]
    request: HttpRequest

    @property
    def rate_key(self) -> str:
        if self.user_id is not None:
            return f"user:{self.user_id}"
        return f"anon:{self.request.session.session_key or self.request.META.get('REMOTE_ADDR', '?')}"

    async def remember(self, session_id: str) -> None:
        """Record that this anonymous visitor owns ``session_id``."""
        if self.user_id is not None or session_id in self.anonymous_sessions:
            return
        self.anonymous_sessions.append(session_id)
        del self.anonymous_sessions[:-100]

        def save() -> None:
            self.request.session[ANONYMOUS_KEY] = list(self.anonymous_sessions)
            self.request.session.save()

        await db(save)()


def _token_user(key: str) -> int | None:
    from rest_framework.authtoken.models import Token

    rows = Token.objects.filter(key=key, user__is_active=True).values_list("user_id", flat=True)[:1]
    return next(iter(rows), None)


def _caller(request: HttpRequest) -> Caller:
    header = request.headers.get("Authorization", "")
    if header.startswith("Token "):
        user_id = _token_user(header[6:].strip())
        if user_id is None:
            raise UnauthorizedError("Invalid token")
        return Caller(user_id, True, [], request)
    user = request.user  # loads the Django session and the user, here rather than per request thread
    if user.is_authenticated:
        return Caller(user.pk, False, [], request)
    if not helix_settings.ALLOW_ANONYMOUS:
        raise UnauthorizedError()
    return Caller(None, False, list(request.session.get(ANONYMOUS_KEY, [])), request)


def _session_access(caller: Caller, session_id: str) -> bool:
    try:
        key = uuid.UUID(session_id)
    except ValueError:
        raise NotFoundError(f"Session {session_id} not found") from None
    rows = list(Session.objects.filter(pk=key).values_list("owner_id", flat=True)[:1])
    if not rows:
        return False
    owner_id = rows[0]
    if caller.user_id is not None and owner_id == caller.user_id:
        return True
    if caller.user_id is None and owner_id is None and str(key) in caller.anonymous_sessions:
        return True
    raise NotFoundError(f"Session {session_id} not found")


async def caller_of(request: HttpRequest) -> Caller:
    """Authenticate ``request`` (token header, else the Django session). Raises
    :class:`UnauthorizedError` for a bad token, or for no user when anonymous mode is off."""
    return await db(_caller)(request)


async def session_access(caller: Caller, session_id: str) -> bool:
    """``True`` if the session exists and ``caller`` owns it, ``False`` if it does not exist;
    raises :class:`NotFoundError` when it belongs to someone else (or the id is malformed)."""
    return await db(_session_access)(caller, session_id)


async def authorize(request: HttpRequest, session_id: str) -> tuple[Caller, bool]:
    """:func:`caller_of` and :func:`session_access` in one trip to the database thread."""

    def both() -> tuple[Caller, bool]:
        caller = _caller(request)
        return caller, _session_access(caller, session_id)

    return await db(both)()


def check_rate_limit(caller: Caller) -> None:
    """A fixed window per caller: ``HELIX["RATE_LIMIT"]`` chat POSTs per minute."""
    limit = int(helix_settings.RATE_LIMIT)
    if limit <= 0:
        return
    window = int(time.time() // 60)
    key = f"helix:rate:{caller.rate_key}:{window}"
    count = cache.get_or_set(key, 0, timeout=70)
    try:
        count = cache.incr(key)
    except ValueError:
        cache.set(key, 1, timeout=70)
        count = 1
    if count > limit:
        raise RateLimitedError(retry_after=60 - int(time.time()) % 60)
