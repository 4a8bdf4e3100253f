"""The ASGI entry of Helix: resume streams served without a thread each, and flow control.

Django's ASGI handler gives every request a thread for thread-sensitive work (it sends
``request_started`` through one) and keeps it until the request ends. A resumed stream can stay
open for minutes, so under Django each would hold a thread. :class:`StreamRouter` resolves every
GET against the site's URLconf; when it lands on a Helix resume view (``chat/<id>`` or
``chat/<id>/stream``, under whatever prefix the site mounted ``chat.urls`` at), it calls that
same view here, on the event loop, and streams its response, stopping the reader when the client
disconnects. The view runs the one pipeline every endpoint runs (the site's authentication,
permissions and throttles, ownership); the site's middleware does not, so the request carries
the Django session and the user the middleware would attach, loaded on first use. Everything
else goes to Django unchanged.

A site wraps its ASGI application once::

    application = StreamRouter(get_asgi_application())
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.sessions.backends.base import SessionBase
from django.core.handlers.asgi import ASGIRequest
from django.http import JsonResponse
from django.http.request import HttpHeaders
from django.urls import Resolver404, ResolverMatch, get_resolver
from django.utils.functional import cached_property
from django.utils.module_loading import import_string

from chat.http import daphne_limits
from chat.http.body_limit import capped_receive
from chat.http.collector import SetUp
from chat.http.flow_control import flow_controlled, served_by_daphne
from chat.http.request_headers import MetaHeaders
from chat.http.view_lookup import UNKNOWN, Found, find_view
from streams.conf import helix_settings
from streams.exceptions import ExecutionError

__all__ = ["StreamRouter"]

logger = logging.getLogger("helix.http")

_BODILESS = frozenset({"GET", "HEAD", "OPTIONS"})


_UNRESOLVED = object()


class _StreamRequest(ASGIRequest):
    """A Django request with the session and user the middleware would attach, both loaded on
    first use: a token-authenticated resume needs neither (and a reconnect storm is thousands)."""

    @cached_property
    def headers(self) -> HttpHeaders:  # type: ignore[override]
        return MetaHeaders(self.META)

    @cached_property
    def session(self) -> SessionBase:  # type: ignore[override]
        engine = import_string(f"{settings.SESSION_ENGINE}.SessionStore")
        return engine(self.COOKIES.get(settings.SESSION_COOKIE_NAME))  # type: ignore[no-any-return]

    @cached_property
    def user(self) -> Any:  # type: ignore[override]
        return get_user(self)

    @property
    def resolver_match(self) -> ResolverMatch | None:  # type: ignore[override]
        """Django's match of the path, made when first asked for (the route found the view
        without it: see :mod:`chat.http.view_lookup`)."""
        match = self.__dict__.get("_resolver_match", _UNRESOLVED)
        if match is _UNRESOLVED:
            match = self.__dict__["_resolver_match"] = get_resolver().resolve(self.path_info)
        return match  # type: ignore[no-any-return]

    @resolver_match.setter
    def resolver_match(self, match: ResolverMatch | None) -> None:
        if match is not None:  # HttpRequest() sets None: the path's match is made when asked for
            self.__dict__["_resolver_match"] = match


def _stream_route(scope: dict[str, Any]) -> Found | None:
    """The view and arguments of a GET that a Helix resume view serves, else ``None``."""
    if scope["type"] != "http" or scope.get("method") != "GET":
        return None
    path: str = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    # The site's URLconf: no middleware runs here to set another for the request (resolve()
    # would look that up in a context-local first, every time).
    resolver = get_resolver()
    found = find_view(resolver, path)
    if found is UNKNOWN:
        try:
            match = resolver.resolve(path)
        except Resolver404:
            return None
        found = (match.func, match.args, match.kwargs)
    if found is None:
        return None
    view_class = getattr(found[0], "helix_view", None)
    return found if getattr(view_class, "stream_route", False) else None


def _headers(response: Any) -> list[tuple[bytes, bytes]]:
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.items() if k.lower() != "connection"]
    headers += [(b"set-cookie", c.output(header="").strip().encode("latin-1")) for c in response.cookies.values()]
    return headers


async def _send_response(response: Any, receive: Any, send: Any, started: Callable[[], None] = lambda: None) -> None:
    """Send ``response``; ``started()`` once its head and its first part are sent."""
    await send({"type": "http.response.start", "status": response.status_code, "headers": _headers(response)})
    if not response.streaming:
        await send({"type": "http.response.body", "body": response.content})  # type: ignore[attr-defined]
        return
    body = getattr(response, "helix_body", None) or response.streaming_content  # type: ignore[attr-defined]
    del response  # the body is all a stream needs from here: not its response, headers and cookies
    # The body is sent from this task; a second one waits for the client to leave and then
    # cancels this one where its stream waits. Thousands of streams wait open at once, so each
    # holds one task more than the server's, not two and a wait on them.
    this = asyncio.current_task()
    assert this is not None
    streaming, left = True, False

    async def watch() -> None:
        nonlocal left
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        except Exception:  # a server that fails to say: as good as gone
            pass
        if streaming:  # only while the body is sent: a cancel later would land in the clean-up
            left = True
            this.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        try:
            async for part in body:
                await send({"type": "http.response.body", "body": part, "more_body": True})
                started()
                if left:  # the cancel that said so was lost on the way (a wait that ended as it came)
                    if this.cancelling():
                        this.uncancel()
                    break
        except Exception:  # Helix bodies end themselves with an error event; anything else is a bug
            logger.exception("a streamed response broke off")
        streaming = False
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not left or this.uncancel() > 0:  # cancelled by the server too, not only by the client leaving
            raise
    finally:
        streaming = False
        watcher.cancel()
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


async def _respond(route: Found, scope: dict[str, Any], resume_by_owner: Any) -> Any:
    """The response of the Helix view of ``route`` to the request of ``scope``: a Django
    response, or an :class:`~chat.http.owner_resume.OwnerStream` (``resume_by_owner``'s)."""
    view, args, kwargs = route
    try:
        response = await resume_by_owner(view, scope, args, kwargs)
        if response is None:
            response = await view(_StreamRequest(scope, io.BytesIO()), *args, **kwargs)
    except Exception:  # the view renders every error it knows; this is a bug, not the client's
        logger.exception("resume of %s failed", scope.get("path"))
        response = JsonResponse(ExecutionError("The stream could not be resumed").as_dict(), status=500)
    return response


class StreamRouter:
    """ASGI: resume GETs to their Helix view here, everything else to ``django_app``; every
    response's writes flow-controlled, and request bodies capped where the server does not
    (:mod:`chat.http.body_limit`).

    Every HTTP response's ``send`` waits while the client's socket is full (see
    :mod:`chat.http.flow_control`), so a slow reader slows its own stream instead of growing the
    server's memory, and one that stops reading is disconnected after
    ``HELIX['SLOW_CLIENT_TIMEOUT_SECONDS']``.
    """

    def __init__(self, django_app: Any) -> None:
        # Here, not at the top: a site's asgi.py imports this module before Django is set up, and
        # the pipeline imports models.
        from chat.http.owner_resume import resume_by_owner
        from chat.http.pipeline import import_classes

        self.django_app = django_app
        self.resume_by_owner = resume_by_owner
        # Import the URLconf (and the views behind it) and the classes of the views' pipeline now,
        # at startup, not in the first request: after a restart that is the first of a storm of
        # reconnecting streams, all waiting on it.
        get_resolver().url_patterns  # noqa: B018
        import_classes()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            capped = served_by_daphne(send) and daphne_limits.active()  # Daphne caps bodies itself
            send = flow_controlled(send, stall_timeout=float(helix_settings.SLOW_CLIENT_TIMEOUT_SECONDS))
            if scope.get("method") not in _BODILESS and not capped:
                receive = await capped_receive(scope, receive, send)
                if receive is None:
                    return
        route = _stream_route(scope)
        if route is None:
            await self.django_app(scope, receive, send)
            return
        # Neither the request nor its route is kept while its stream is open (minutes, thousands
        # of them): the response's body holds what the stream needs.
        responding = _respond(route, scope, self.resume_by_owner)
        del route
        # No automatic collection while a storm's resumes wait for their first bytes (see
        # chat.http.collector): their half-made requests are gone by the time it comes back on.
        set_up = SetUp()
        try:
            await _send_response(await responding, receive, send, set_up.end)
        finally:
            set_up.end()
