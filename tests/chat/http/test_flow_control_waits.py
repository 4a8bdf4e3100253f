"""Flow control's waits give way to a client leaving: a disconnect that cancels a response in the
same turn of the loop as the client's socket stops the wait is not lost (it would be under
Python 3.11's ``asyncio.wait_for``), under Daphne's producer and under uvicorn's drain."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import MutableMapping
from typing import Any

import pytest

from chat.http.flow_control import flow_controlled

BODY: dict[str, Any] = {"type": "http.response.body", "body": b"x", "more_body": True}


class TwistedRequest:
    """What flow control uses of a Twisted request behind Daphne's ``send``."""

    def __init__(self) -> None:
        self.producer: Any = None
        self.finished = False
        self.channel = object()
        self.transport = type("Transport", (), {"bufferSize": 65536})()

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None


async def daphne_send(request: TwistedRequest, message: MutableMapping[str, Any]) -> None:
    pass


async def test_a_send_waiting_on_a_paused_daphne_producer_is_cancelled_when_the_connection_goes() -> None:
    request = TwistedRequest()
    send = flow_controlled(functools.partial(daphne_send, request), stall_timeout=30)
    await send(BODY)  # registers the producer
    request.producer.pauseProducing()  # the socket is full
    waiting = asyncio.ensure_future(send(BODY))
    await asyncio.sleep(0)
    assert not waiting.done()
    # The connection is lost: Twisted stops the producer, and Daphne's disconnect cancels the
    # response, in one turn of the loop.
    request.producer.stopProducing()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


class UvicornCycle:
    """What flow control uses of uvicorn's request cycle behind its ``send``."""

    def __init__(self) -> None:
        self.disconnected = False
        self.transport = type("Transport", (), {"set_write_buffer_limits": lambda self, high: None})()
        self.flow = type("Flow", (), {})()
        self.flow.write_paused = True
        self.flow.writable = asyncio.Event()

        async def drain() -> None:
            await self.flow.writable.wait()

        self.flow.drain = drain

    async def send(self, message: MutableMapping[str, Any]) -> None:
        pass


async def test_a_send_waiting_for_uvicorns_drain_is_cancelled_when_the_connection_goes() -> None:
    cycle = UvicornCycle()
    send = flow_controlled(cycle.send, stall_timeout=30)
    waiting = asyncio.ensure_future(send(BODY))
    await asyncio.sleep(0)
    assert not waiting.done()
    cycle.flow.writable.set()  # uvicorn lets writers go as the connection closes
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
