"""Limits Daphne applies before any application code runs: request bodies capped while they are
read, and a deadline for a new connection's request headers.

Daphne's HTTP layer (Twisted) reads a request's whole body, chunked or not, before the ASGI
application is called, and then hands it over at once: a view's own size check comes after the
server already holds the body, and an unauthenticated 100 MB upload costs 100 MB. And Twisted's
idle timeout restarts with every byte, so a client that sends its headers a byte at a time keeps
a connection for as long as it likes.

:func:`install` (called when the app is ready; nothing to do in the site's ``asgi.py``) makes
Daphne refuse a body as soon as it passes ``HELIX["SERVER_MAX_BODY_BYTES"]`` (from its
``Content-Length`` when it has one, else as the chunks arrive) with a typed ``413
PAYLOAD_TOO_LARGE`` and a closed connection, and drop a connection whose first request's headers
are not complete within ``HELIX["SERVER_HEADER_TIMEOUT_SECONDS"]``. The limit is the whole site's
(Daphne serves the host site's other views too): raise it, or set it to ``None``, for a site
that takes larger uploads. Other servers apply their own limits (see the README's deployment
section).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from chat.exceptions import PayloadTooLargeError
from streams.conf import helix_settings

__all__ = ["active", "install"]

logger = logging.getLogger("helix.http")

_installed = False

#: How long a refused upload's connection is kept reading (and dropping) after the answer.
LINGER_SECONDS = 2.0


def _refusal() -> bytes:
    limit = helix_settings.SERVER_MAX_BODY_BYTES
    error = PayloadTooLargeError(f"The request body is over this server's limit of {limit} bytes")
    body = json.dumps(error.as_dict()).encode()
    head = (
        "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def active() -> bool:
    """Whether the limits are in Daphne's factories (``daphne.server`` was imported before the app
    was ready: a Daphne process, or a process that imported it, such as ``runserver``'s)."""
    return _installed


def install() -> None:
    """Put the limits into Daphne's request and connection factories (once per process)."""
    global _installed
    if _installed or "daphne.server" not in sys.modules:
        return  # not a Daphne process (its server module, imported first, installs the reactor)
    from daphne import http_protocol, server
    from twisted.internet import reactor as twisted_reactor

    reactor: Any = twisted_reactor  # the installed reactor (Twisted's stubs type the interface)

    class LimitedRequest(http_protocol.WebRequest):  # type: ignore[misc, name-defined]
        """Daphne's request, refusing a body past the limit while it arrives."""

        _received = 0
        _refused = False

        def gotLength(self, length: int | None) -> None:  # Twisted's names
            self.channel._helix_headers_done = True
            limit = helix_settings.SERVER_MAX_BODY_BYTES
            if limit is not None and length is not None and length > limit:
                self._refuse(f"Content-Length {length}")
            super().gotLength(None if self._refused else length)

        def handleContentChunk(self, data: bytes) -> None:
            if self._refused:
                return
            self._received += len(data)
            limit = helix_settings.SERVER_MAX_BODY_BYTES
            if limit is not None and self._received > limit:
                self._refuse(f"more than {limit} bytes")
                return
            super().handleContentChunk(data)

        def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
            if not self._refused:  # a refused request never reaches the application
                super().requestReceived(command, path, version)

        def _refuse(self, why: str) -> None:
            self._refused = True
            transport = self.channel.transport
            logger.warning("refused a request body from %s: %s", transport.getPeer(), why)
            # Answer, stop sending, and read (and drop) what the client still sends for a moment:
            # closing with its data unread would reset the connection, and the client might
            # lose the answer.
            transport.write(_refusal())
            transport.loseWriteConnection()
            reactor.callLater(LINGER_SECONDS, transport.abortConnection)

    class LimitedHTTPFactory(http_protocol.HTTPFactory):  # type: ignore[misc, name-defined]
        """Daphne's connection factory, with a deadline for the first request's headers."""

        def buildProtocol(self, addr: Any) -> Any:
            protocol = super().buildProtocol(addr)
            protocol.requestFactory = LimitedRequest
            timeout = helix_settings.SERVER_HEADER_TIMEOUT_SECONDS
            if timeout:
                reactor.callLater(float(timeout), _check_headers, protocol)
            return protocol

    def _check_headers(protocol: Any) -> None:
        channel = getattr(protocol, "_channel", protocol)
        transport = getattr(channel, "transport", None)
        if transport is None or getattr(channel, "_helix_headers_done", False):
            return
        logger.warning("dropped %s: no complete request headers in time", transport.getPeer())
        transport.abortConnection()

    server.HTTPFactory = LimitedHTTPFactory
    _installed = True
