"""An opt-in for sites served by Daphne: request bodies capped while they are read, and a
deadline for every request's headers.

Daphne's HTTP layer (Twisted) reads a request's whole body, chunked or not, before the ASGI
application is called, and then hands it over at once: an application's own size check comes
after the server already holds the body, and an unauthenticated 100 MB upload costs 100 MB. And
Twisted's idle timeout restarts with every byte, so a client that sends its headers a byte at a
time keeps a connection for as long as it likes.

A site that wants these limits calls :func:`install` in its ``asgi.py``; nothing installs them
otherwise. Daphne then refuses a body as soon as it passes ``HELIX["SERVER_MAX_BODY_BYTES"]``
(from its ``Content-Length`` when it has one, else as the chunks arrive) with a typed ``413
PAYLOAD_TOO_LARGE`` and a closed connection, and drops a connection whose next request's headers
are not complete within ``HELIX["SERVER_HEADER_TIMEOUT_SECONDS"]`` of the connection's start or of
the end of its last response (an idle keep-alive connection included). The limits are the whole
site's, since Daphne serves its other views too: raise them, or set them to ``None``, for a site
that takes larger uploads. Under other servers :func:`install` does nothing; they apply limits of
their own (see ``docs/deployment.md``).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from chat.exceptions import PayloadTooLargeError
from streams.conf import helix_settings

__all__ = ["install"]

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


def install() -> None:
    """Put the limits into Daphne's request and connection factories (once per process; in a
    process that is not Daphne's, nothing)."""
    global _installed
    if _installed or "daphne.server" not in sys.modules:
        return  # not a Daphne process (its server module, imported first, installs the reactor)
    from daphne import http_protocol, server
    from twisted.internet import reactor as twisted_reactor

    reactor: Any = twisted_reactor  # the installed reactor (Twisted's stubs type the interface)

    class LimitedRequest(http_protocol.WebRequest):  # type: ignore[misc]
        """Daphne's request, refusing a body past the limit while it arrives."""

        _received = 0
        _refused = False

        def gotLength(self, length: int | None) -> None:  # Twisted's names
            self.channel._helix_requests = getattr(self.channel, "_helix_requests", 0) + 1
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

        def finish(self) -> None:
            channel = self.channel
            super().finish()
            if channel is not None:  # the next request's headers are due in time too
                _expect_headers(channel)

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

    class LimitedHTTPFactory(http_protocol.HTTPFactory):  # type: ignore[misc]
        """Daphne's connection factory, with a deadline for the first request's headers."""

        def buildProtocol(self, addr: Any) -> Any:
            protocol = super().buildProtocol(addr)
            protocol.requestFactory = LimitedRequest
            _expect_headers(getattr(protocol, "_channel", protocol))
            return protocol

    def _expect_headers(channel: Any) -> None:
        timeout = helix_settings.SERVER_HEADER_TIMEOUT_SECONDS
        if timeout:
            reactor.callLater(float(timeout), _check_headers, channel, getattr(channel, "_helix_requests", 0))

    def _check_headers(channel: Any, requests: int) -> None:
        transport = getattr(channel, "transport", None)
        if transport is None or getattr(channel, "_helix_requests", 0) > requests:
            return
        if any(not getattr(r, "finished", True) for r in getattr(channel, "requests", ())):
            return  # a response still being sent: its end sets the next deadline
        logger.warning("dropped %s: no complete request headers in time", transport.getPeer())
        transport.abortConnection()

    server.HTTPFactory = LimitedHTTPFactory
    _installed = True
