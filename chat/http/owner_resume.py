"""A resume by its session's owner with a token, answered without the pipeline's objects.

In a reconnect storm most of what a resume costs a server is not its reads but the objects the
request pipeline makes for it: DRF's request and view, an instance of every authentication,
permission and throttle class, Django's streaming response and its headers. When a site's
pipeline for a resume comes down to "the token's user owns the session" (Helix's
:class:`~chat.http.authentication.TokenAuthentication` first among its authentication classes,
no permission class but ``AllowAny`` or ``IsAuthenticated``, no throttle but
:class:`~chat.http.throttling.ChatPostThrottle`, which counts chat POSTs only, no API
versioning, and Helix's own resume views at the URLs of ``chat.urls``), :func:`resume_by_owner`
checks a GET that carries a token itself, with the same reads in the same database hop as the
pipeline's (:func:`~chat.state.db.together`, with the token and the run read ahead for the hop).

It answers only what the pipeline would allow: an active user's token, for a session that user
owns and that has a run. Anything else (no token, an unknown or inactive one, someone else's
session, no run yet, a malformed position, a caller at its cap of open streams) is left to the
pipeline, which answers it as it always has, with its error and its headers. So is a view the
site's URLconf wraps in a decorator, or makes with arguments to ``as_view()``. A refused request
thus makes its reads twice (the token, the run, a page read ahead): once here, once in the
pipeline.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Mapping
from types import MappingProxyType
from typing import Any, cast

from django.core.signals import setting_changed
from django.http.response import HttpResponseBase
from rest_framework.permissions import AllowAny, IsAuthenticated

from chat.exceptions import TooManyStreamsError
from chat.http.authentication import TokenAuthentication
from chat.http.open_streams import admit, counted, user_key
from chat.http.pipeline import helix_exception_handler, pipeline_classes
from chat.http.request_headers import HeadersOnly
from chat.http.throttling import ChatPostThrottle
from chat.http.views import ChatStreamView, ChatView, django_headers, to_django
from chat.services import get_handler
from chat.session_ids import canonical_session_id
from chat.state.db import ReadAhead, together
from chat.state.reads import current_run_and_owner, read_current_runs_ahead
from streams.exceptions import HelixError
from streams.sse import extract_resume_position

__all__ = ["OwnerStream", "resume_by_owner"]

_VIEWS = (ChatView, ChatStreamView)
_PERMISSIONS = (AllowAny, IsAuthenticated)
#: Each view's ``Allow``, as DRF's pipeline sends it.
_allow: dict[type, str] = {}


class OwnerStream:
    """The streamed answer of a resume served here: its status, its headers as Django's response
    would list them, and its body (what :mod:`chat.http.asgi` sends of a response)."""

    streaming = True
    cookies: Mapping[str, Any] = MappingProxyType({})

    def __init__(self, status: int, headers: dict[str, str], body: AsyncIterator[bytes]) -> None:
        self.status_code, self._headers, self.helix_body = status, headers, body

    def items(self) -> Any:
        return self._headers.items()


@functools.cache
def _pipeline_is_the_owners_token() -> bool:
    """Whether the site's pipeline allows a resume exactly when the token's user owns it."""
    authentication, permissions, throttles = pipeline_classes()
    return (
        bool(authentication)
        and authentication[0] is TokenAuthentication
        and all(permission in _PERMISSIONS for permission in permissions)
        and all(throttle is ChatPostThrottle for throttle in throttles)
    )


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting in ("HELIX", "REST_FRAMEWORK"):
        _pipeline_is_the_owners_token.cache_clear()


setting_changed.connect(_forget)


async def resume_by_owner(
    view: Callable[..., Any], scope: Mapping[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> HttpResponseBase | OwnerStream | None:
    """The answer to a resume GET (ASGI ``scope``) of ``view`` (a URLconf's view function, called
    with ``args`` and ``kwargs``) by its session's owner with a token; ``None`` when the pipeline
    is to answer it."""
    view_class = getattr(view, "helix_view", None)
    if (
        view_class not in _VIEWS
        or getattr(view, "helix_view_function", None) is not view  # wrapped in a decorator of the site's
        or getattr(view, "view_initkwargs", None)
        or args
        or kwargs.keys() != {"session_id"}  # a URL that passes the view more than chat.urls does
        or view_class.versioning_class is not None  # DRF copies the setting onto the class
        or not _pipeline_is_the_owners_token()
    ):
        return None
    request = HeadersOnly(scope)
    authenticator = TokenAuthentication()
    token_ahead = authenticator.read_ahead(cast(Any, request), owner=True)
    if token_ahead is None:
        return None
    try:
        position = extract_resume_position(request)
        session_id = canonical_session_id(kwargs["session_id"])
    except HelixError:
        return None
    key, owners, handler = cast(str, token_ahead.key), authenticator.owner_read(), get_handler()

    def owner_and_run() -> Any:
        # authenticate_credentials() and the resume views' session_access(), allowing only.
        user_id = owners.owner(key)
        if user_id is None:
            return None
        found = current_run_and_owner(session_id)
        if found is None or found[1] != user_id:
            return None
        return found[0], user_id

    allow = _allow.get(view_class) or _allow.setdefault(view_class, ", ".join(view_class().allowed_methods))
    ahead = handler.read_ahead(session_id, position) if position is not None else None
    try:
        checked = await together(owner_and_run, token_ahead, ReadAhead(read_current_runs_ahead, session_id))
        if checked is None:
            return None
        run, user_id = checked
        streams_of = user_key(user_id)
        try:
            admit(streams_of)
        except TooManyStreamsError:
            return None
        response = await handler.handle_resume(session_id, request, run=run, ahead=ahead, position=position)
    except Exception as exc:  # the database or the store failed: rendered as the pipeline renders it
        failed = helix_exception_handler(exc, {})
        if failed is None:
            raise
        failed["Allow"] = allow
        return failed
    finally:
        if ahead is not None:
            ahead.cancel()  # a page no one took; harmless once taken
    if not response.is_stream:
        answer = to_django(response)
        answer["Allow"] = allow
        return answer
    headers, content_type = django_headers(response)
    headers["Content-Type"] = content_type  # in the order Django's response lists them
    headers["Allow"] = allow
    return OwnerStream(response.status, headers, counted(streams_of, cast(AsyncIterator[bytes], response.body)))
