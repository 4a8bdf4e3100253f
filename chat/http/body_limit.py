"""The request body cap of Helix's endpoints, applied before Django reads the body.

:class:`~chat.http.asgi.HelixLimits` reads the body of a request to one of Helix's URLs here as
it arrives, as Django would read it anyway before any view runs; one past the cap (by its
``Content-Length``, or by the chunks so far) is answered ``413 PAYLOAD_TOO_LARGE`` with
``Connection: close`` without reading further, before authentication, and the site's application
never sees it. A body within the cap is handed on as it was received.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from chat.exceptions import PayloadTooLargeError

__all__ = ["capped_receive"]

logger = logging.getLogger("helix.http")

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: How long a refused upload is read (and dropped) after the answer, at most.
LINGER_SECONDS = 2.0


def _declared_length(scope: MutableMapping[str, Any]) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(scope: MutableMapping[str, Any], receive: Receive, send: Send, limit: int, why: str) -> None:
    """Answer 413, then read (and drop) what the client still sends for a moment before the
    response ends and the server closes: closing with its data unread would reset the
    connection, and the client might lose the answer."""
    logger.warning("refused a request body from %s: %s", (scope.get("client") or ("?",))[0], why)
    error = PayloadTooLargeError(f"The request body is over this server's limit of {limit} bytes")
    body = json.dumps(error.as_dict()).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": True})
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(LINGER_SECONDS):
            while True:
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body", False):
                    break
    await send({"type": "http.response.body", "body": b""})


async def capped_receive(scope: MutableMapping[str, Any], receive: Receive, send: Send, limit: int) -> Receive | None:
    """``receive`` for a request whose body is within ``limit`` bytes (read here, handed on as it
    came), or ``None`` once a body past it has been answered 413."""
    declared = _declared_length(scope)
    if declared is not None and declared > limit:
        await _refuse(scope, receive, send, limit, f"Content-Length {declared}")
        return None
    messages: list[MutableMapping[str, Any]] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > limit:
            await _refuse(scope, receive, send, limit, f"more than {limit} bytes")
            return None
        if not message.get("more_body", False):
            break

    async def replay() -> MutableMapping[str, Any]:
        return messages.pop(0) if messages else await receive()

    return replay
