"""Write backpressure for ASGI responses, and a bound on slow clients, under Daphne and uvicorn.

Daphne hands every ``http.response.body`` straight to Twisted, which buffers whatever the socket
cannot take: a client that stops reading makes the server hold an ever-growing response in
memory. Twisted does have flow control, as its producer/consumer API: a streaming producer
registered on the request is paused when the transport's buffer fills and resumed when it
drains. :func:`flow_controlled` registers one and makes ``send`` wait while it is paused, so a
streamed response pulls from its reader (and from Redis) no faster than the client reads; what
the server holds per connection is bounded by Twisted's buffer, the message in it that went
past the bound, and the next one, made while the client read and waiting to be written.

uvicorn applies backpressure itself: its ``send`` waits while the socket's buffer is above the
transport's high-water mark. There the buffer is lowered to the same bound, and the wait is
the same one, made here where it can be given up.

Either way, a client paused for longer than ``stall_timeout`` seconds (a phone that lost its
network, a reader that hung) is disconnected: the stream's chunks stay in the store, and the
client resumes from its last event id when it comes back. Under any other server ``send`` is
returned unchanged.

The waits are ``asyncio.timeout`` blocks, not ``asyncio.wait_for``. When a client leaves, the
wait for its socket ends (Twisted stops the producer) in the same turn of the loop as the
server's disconnect cancels the response; Python 3.11's ``wait_for`` then returns as though
nothing had been cancelled, and the response would go on reading its stream for no one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["flow_controlled", "served_by_daphne"]

logger = logging.getLogger("helix.http")

#: What Twisted may buffer for one connection beyond the socket before its producer is paused
#: (Twisted's default is 64 KiB): with one page of the reader, what a slow client can make the
#: server hold.
SOCKET_BUFFER_BYTES = 16 * 1024

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _WritablePushProducer:
    """A Twisted push producer whose pause/resume toggle an asyncio event."""

    def __init__(self) -> None:
        self.writable = asyncio.Event()
        self.writable.set()

    # Twisted's IPushProducer, camelCase as Twisted names it.
    def pauseProducing(self) -> None:
        self.writable.clear()

    def resumeProducing(self) -> None:
        self.writable.set()

    def stopProducing(self) -> None:  # the connection is going away: let a waiting send return
        self.writable.set()


def _twisted_request(send: Send) -> Any | None:
    """The Twisted request behind a Daphne ``send`` (``partial(server.handle_reply, protocol)``)."""
    if not isinstance(send, functools.partial) or not send.args:
        return None
    request = send.args[0]
    if callable(getattr(request, "registerProducer", None)) and hasattr(request, "transport"):
        return request
    return None


def served_by_daphne(send: Send) -> bool:
    """Whether ``send`` is Daphne's (which then applies the server limits of :mod:`chat.http.daphne_limits`)."""
    return _twisted_request(send) is not None


def _uvicorn_cycle(send: Send) -> Any | None:
    """The uvicorn request cycle behind a uvicorn ``send`` (its bound method), with the
    connection's flow control and transport."""
    cycle = getattr(send, "__self__", None)
    if cycle is not None and hasattr(getattr(cycle, "flow", None), "drain") and hasattr(cycle, "transport"):
        return cycle
    return None


def _stalled(stall_timeout: float) -> None:
    logger.info("client stopped reading for %.0f s: disconnected (it resumes later)", stall_timeout)


def _uvicorn_controlled(send: Send, cycle: Any, stall_timeout: float) -> Send:
    with contextlib.suppress(Exception):  # pause sooner: less held per slow client
        cycle.transport.set_write_buffer_limits(high=SOCKET_BUFFER_BYTES)

    async def controlled_send(message: MutableMapping[str, Any]) -> None:
        flow = cycle.flow
        if flow.write_paused and not cycle.disconnected:
            try:
                async with asyncio.timeout(stall_timeout):
                    await flow.drain()
            except TimeoutError:
                _stalled(stall_timeout)
                cycle.transport.abort()
                return
        await send(message)

    return controlled_send


def flow_controlled(send: Send, *, stall_timeout: float) -> Send:
    """``send`` that waits while the client's socket is full, and drops a client stalled too long."""
    request = _twisted_request(send)
    if request is None:
        cycle = _uvicorn_cycle(send)
        return send if cycle is None else _uvicorn_controlled(send, cycle, stall_timeout)
    producer = _WritablePushProducer()
    state = {"registered": False, "done": False}

    def unregister() -> None:
        if state["registered"]:
            state["registered"] = False
            if getattr(request, "producer", None) is producer and request.channel is not None:
                request.unregisterProducer()

    async def controlled_send(message: MutableMapping[str, Any]) -> None:
        if state["done"]:
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        if not state["registered"] and not getattr(request, "finished", True) and request.channel is not None:
            transport = getattr(request, "transport", None)
            if transport is not None and getattr(transport, "bufferSize", 0) > SOCKET_BUFFER_BYTES:
                transport.bufferSize = SOCKET_BUFFER_BYTES  # pause sooner: less held per slow client
            request.registerProducer(producer, True)
            state["registered"] = True
        if not message.get("more_body", False):
            state["done"] = True
            unregister()  # Twisted wants no producer left when the request finishes
            await send(message)
            return
        # The wait comes before the write, as uvicorn's does: while the client drains the last
        # part, the caller makes the next one (a replay frames its next page meanwhile).
        if not producer.writable.is_set():
            try:
                async with asyncio.timeout(stall_timeout):
                    await producer.writable.wait()
            except TimeoutError:
                state["done"] = True
                unregister()
                _stalled(stall_timeout)
                transport = getattr(request, "transport", None)
                if transport is not None:
                    transport.abortConnection()
                return
        await send(message)

    return controlled_send
