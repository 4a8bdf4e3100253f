"""Resume streams served straight from ASGI, outside Django's per-request handling.

Django's ASGI handler gives every request a thread for thread-sensitive work (it sends
``request_started`` through one) and keeps it until the request ends. A resumed stream can stay
open for minutes, so under Django each would hold a thread. :class:`StreamRouter` sends ``GET
/api/chat/<id>`` and ``GET /api/chat/<id>/stream`` to this app instead; it authenticates like the
views (token header, or the Django session cookie), checks ownership, and streams the
framework-agnostic :class:`~chat.handler.HandlerResponse`, stopping its reader when the client
disconnects. Every other request goes to Django unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.sessions.backends.base import SessionBase
from django.core.handlers.asgi import ASGIRequest
from django.utils.functional import cached_property
from django.utils.module_loading import import_string

from chat.access import authorize
from chat.flow_control import flow_controlled
from chat.handler import HandlerResponse, error_response
from streams.conf import helix_settings
from streams.exceptions import HelixError

__all__ = ["StreamRouter"]

STREAM_PATH = re.compile(r"^/api/chat/(?P<session_id>[^/]+)(?:/stream)?/?$")


class _StreamRequest(ASGIRequest):
    """A Django request with the session and user the middleware would attach, both loaded on
    first use: a token-authenticated resume needs neither (and a reconnect storm is thousands)."""

    @cached_property
    def session(self) -> SessionBase:  # type: ignore[override]
        engine = import_string(f"{settings.SESSION_ENGINE}.SessionStore")
        return engine(self.COOKIES.get(settings.SESSION_COOKIE_NAME))  # type: ignore[no-any-return]

    @cached_property
    def user(self) -> Any:  # type: ignore[override]
        return get_user(self)


def _request(scope: dict[str, Any]) -> ASGIRequest:
    return _StreamRequest(scope, io.BytesIO())


async def _send_response(response: HandlerResponse, receive: Any, send: Any) -> None:
    headers = [
        (k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items() if k.lower() != "connection"
    ]
    if response.is_stream and not any(k == b"content-type" for k, _ in headers):
        headers.append((b"content-type", b"text/event-stream"))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    if response.body is None or isinstance(response.body, str):
        await send({"type": "http.response.body", "body": (response.body or "").encode()})
        return
    body = response.body

    async def pump() -> None:
        async for part in body:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    streaming, watching = asyncio.ensure_future(pump()), asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait((streaming, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (streaming, watching):
            task.cancel()
        for task in (streaming, watching):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


class StreamRouter:
    """ASGI: resume GETs to the stream app, everything else to ``django_app``; writes flow-controlled.

    Every HTTP response's ``send`` waits while the client's socket is full (see
    :mod:`chat.flow_control`), so a slow reader slows its own stream instead of growing the
    server's memory, and one that stops reading is disconnected after
    ``HELIX['SLOW_CLIENT_TIMEOUT_SECONDS']``.
    """

    def __init__(self, django_app: Any) -> None:
        self.django_app = django_app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            send = flow_controlled(send, stall_timeout=float(helix_settings.SLOW_CLIENT_TIMEOUT_SECONDS))
        match = STREAM_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope.get("method") != "GET":
            await self.django_app(scope, receive, send)
            return
        await _send_response(await self.resume(scope, match["session_id"]), receive, send)

    async def resume(self, scope: dict[str, Any], session_id: str) -> HandlerResponse:
        from chat.runtime import get_handler

        request = _request(scope)
        try:
            _, exists = await authorize(request, session_id)
            if not exists:
                return HandlerResponse(204)
            return await get_handler().handle_resume(session_id, request)
        except HelixError as exc:
            return error_response(exc)
