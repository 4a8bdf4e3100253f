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

    token = Token.objects.filter(key=key).select_related("user").first()
    return token.user.pk if token and token.user.is_active else None


async def caller_of(request: HttpRequest) -> Caller:
    """Authenticate ``request`` (token header, else the Django session). Raises
    :class:`UnauthorizedError` for a bad token, or for no user when anonymous mode is off."""
    header = request.headers.get("Authorization", "")
    if header.startswith("Token "):
        user_id = await db(_token_user)(header[6:].strip())
        if user_id is None:
            raise UnauthorizedError("Invalid token")
        return Caller(user_id, True, [], request)

    def from_cookie() -> tuple[int | None, list[str]]:
        user = request.user  # loads the Django session and the user, here rather than per request thread
        if user.is_authenticated:
            return user.pk, []
        return None, list(request.session.get(ANONYMOUS_KEY, []))

    user_id, sessions = await db(from_cookie)()
    if user_id is not None:
        return Caller(user_id, False, [], request)
    if not helix_settings.ALLOW_ANONYMOUS:
        raise UnauthorizedError()
    return Caller(None, False, sessions, request)


def _owner_of(session_id: uuid.UUID) -> tuple[bool, int | None]:
    rows = list(Session.objects.filter(pk=session_id).values_list("owner_id", flat=True)[:1])
    return (True, rows[0]) if rows else (False, None)


async def session_access(caller: Caller, session_id: str) -> bool:
    """``True`` if the session exists and ``caller`` owns it, ``False`` if it does not exist;
    raises :class:`NotFoundError` when it belongs to someone else (or the id is malformed)."""
    try:
        key = uuid.UUID(session_id)
    except ValueError:
        raise NotFoundError(f"Session {session_id} not found") from None
    exists, owner_id = await db(_owner_of)(key)
    if not exists:
        return False
    if caller.user_id is not None and owner_id == caller.user_id:
        return True
    if caller.user_id is None and owner_id is None and str(key) in caller.anonymous_sessions:
        return True
    raise NotFoundError(f"Session {session_id} not found")


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
