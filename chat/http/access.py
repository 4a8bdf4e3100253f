"""Who may touch which session: the caller, its sessions, and the anonymous mode.

A session belongs to its owner; any other caller gets a 404 for it, as if it did not exist. In
anonymous mode (``HELIX["ALLOW_ANONYMOUS"]``) a visitor without an account owns the sessions it
created, remembered in its Django session. Who the caller *is* comes from the site's DRF
authentication classes (:mod:`chat.http.pipeline`); this module only decides what it may touch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from rest_framework.permissions import BasePermission

from chat.exceptions import SessionNotFoundError
from chat.models import ChatSession
from chat.state.db import db
from streams.conf import helix_settings

__all__ = ["ANONYMOUS_KEY", "Caller", "HelixCaller", "caller_of", "owner_access", "session_access"]

ANONYMOUS_KEY = "helix_sessions"
REMEMBERED_SESSIONS = 100


@dataclass
class Caller:
    """The authenticated user (``user_id``), or an anonymous visitor with the sessions it owns."""

    user_id: Any
    anonymous_sessions: list[str]
    request: HttpRequest

    async def remember(self, session_id: str) -> None:
        """Record that this anonymous visitor owns ``session_id``."""
        if self.user_id is not None or session_id in self.anonymous_sessions:
            return
        self.anonymous_sessions.append(session_id)
        del self.anonymous_sessions[:-REMEMBERED_SESSIONS]

        def save() -> None:
            self.request.session[ANONYMOUS_KEY] = list(self.anonymous_sessions)
            self.request.session.save()

        await db(save)()


def caller_of(request: Any) -> Caller:
    """The caller of an authenticated DRF request (``request.user`` already resolved)."""
    user = request.user
    django_request = getattr(request, "_request", request)
    if user is not None and user.is_authenticated:
        return Caller(user.pk, [], django_request)
    session = getattr(django_request, "session", None)
    owned = list(session.get(ANONYMOUS_KEY, [])) if session is not None else []
    return Caller(None, owned, django_request)


class HelixCaller(BasePermission):
    """Always applied after the site's permission classes: a signed-in user, or anyone when
    ``HELIX["ALLOW_ANONYMOUS"]`` is on."""

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        return bool(user is not None and user.is_authenticated) or bool(helix_settings.ALLOW_ANONYMOUS)


def session_access(caller: Caller, session_id: str) -> bool:
    """``True`` if the session exists and ``caller`` owns it, ``False`` if it does not exist;
    raises :class:`SessionNotFoundError` when it belongs to someone else. ``session_id`` is
    canonical (:func:`chat.session_ids.canonical_session_id`). Synchronous: call it on a database
    thread."""
    rows = list(ChatSession.objects.filter(pk=session_id).values_list("owner_id", flat=True)[:1])
    return bool(rows) and owner_access(caller, session_id, rows[0])


def owner_access(caller: Caller, session_id: str, owner_id: Any) -> bool:
    """``True`` if ``caller`` owns session ``session_id``, whose owner is ``owner_id`` (read by
    the caller, with whatever else it read of the session); else :class:`SessionNotFoundError`."""
    if caller.user_id is not None and owner_id == caller.user_id:
        return True
    if caller.user_id is None and owner_id is None and session_id in caller.anonymous_sessions:
        return True
    raise SessionNotFoundError(f"Session {session_id} not found")
