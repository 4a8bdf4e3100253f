"""The baselines of the HTTP benchmark: bare ASGI apps doing Helix's jobs with nothing else, run
under the same server as Helix so that every figure can be given as a ratio to them.

``/events?n=10000``
    N pre-encoded SSE events on one connection, one ``send`` each (the replay baseline).
``/hello``
    A tiny JSON answer (accept and answer a connection: the reconnect storm's floor).
``/fanout/<stream>``
    Live fan-out, the floor for "Redis write → bytes on N sockets": one Redis pub/sub
    connection per process (``FANOUT_REDIS_URL``), subscribed to a stream's channel while some
    connection follows that stream; each published chunk is framed once as an SSE event and
    handed to every connection of its stream, which writes what it was handed since its last
    write in one ``send``. No sequences, no store reads, no resume, no authentication. It is fed
    by the same writes as Helix (the store's append script, which announces each chunk on the
    stream's channel as ``<sequence>\\n<chunk>…``; ``FANOUT_KEY_PREFIX`` is the store's key
    prefix), so that the load, Redis included, is the same for both apps and only the servers
    differ.
"""

from __future__ import annotations

import asyncio
import gc
import os
from typing import Any

gc.set_threshold(5_000, 10, 10)  # as the demo site's asgi.py: both servers collect alike

EVENT = b'id: 1\ndata: {"type":"text-delta","id":"text-1","delta":"some streamed words "}\n\n'
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class _Follower:
    """One connection's mailbox: frames waiting to be written."""

    __slots__ = ("frames", "wake")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.wake = asyncio.Event()

    def hand(self, frame: bytes) -> None:
        self.frames.append(frame)
        self.wake.set()


class FanOut:
    """The process's one pub/sub connection and the followers of each channel."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self.followers: dict[bytes, set[_Follower]] = {}
        self.pubsub: Any = None
        self.task: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()

    async def follow(self, channel: bytes, follower: _Follower) -> None:
        async with self.lock:
            if self.pubsub is None:
                import redis.asyncio as redis

                self.pubsub = redis.Redis.from_url(self.redis_url).pubsub()
            followers = self.followers.setdefault(channel, set())
            if not followers:
                await self.pubsub.subscribe(channel)
            followers.add(follower)
            if self.task is None:
                self.task = asyncio.ensure_future(self._listen())

    async def leave(self, channel: bytes, follower: _Follower) -> None:
        async with self.lock:
            followers = self.followers.get(channel)
            if followers is None:
                return
            followers.discard(follower)
            if not followers:
                del self.followers[channel]
                await self.pubsub.unsubscribe(channel)

    async def _listen(self) -> None:
        while True:
            message = await self.pubsub.get_message(timeout=None)
            if message is None or message["type"] != "message":
                continue
            followers = self.followers.get(message["channel"])
            data: bytes = message["data"]
            if followers and not data.startswith(b"!"):  # chunks, not a status change
                # Framed once, for every follower: each chunk after the announcement's sequence.
                frame = b"".join([b"data: %s\n\n" % chunk for chunk in data.split(b"\n")[1:]])
                for follower in followers:
                    follower.hand(frame)


_fanouts: dict[asyncio.AbstractEventLoop, FanOut] = {}


def _fanout() -> FanOut:
    loop = asyncio.get_running_loop()
    if loop not in _fanouts:
        _fanouts[loop] = FanOut(os.environ.get("FANOUT_REDIS_URL", "redis://127.0.0.1:6379/15"))
    return _fanouts[loop]


async def _follow(channel: bytes, receive: Any, send: Any) -> None:
    fanout, follower = _fanout(), _Follower()
    await fanout.follow(channel, follower)
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    await send({"type": "http.response.body", "body": b": open\n\n", "more_body": True})  # as Helix's

    async def write() -> None:
        while True:
            await follower.wake.wait()
            follower.wake.clear()
            frames, follower.frames = follower.frames, []
            await send({"type": "http.response.body", "body": b"".join(frames), "more_body": True})

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    writing, watching = asyncio.ensure_future(write()), asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait((writing, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        writing.cancel()
        watching.cancel()
        await fanout.leave(channel, follower)


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path: str = scope["path"]
    if path.startswith("/fanout/"):
        prefix = os.environ.get("FANOUT_KEY_PREFIX", "helix:stream:")
        await _follow(f"{prefix}{{{path[len('/fanout/') :]}}}:n".encode(), receive, send)
        return
    if path == "/hello":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"ok":true}'})
        return
    query = dict(part.split("=") for part in scope.get("query_string", b"").decode().split("&") if "=" in part)
    count = int(query.get("n", "10000"))
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    for _ in range(count):
        await send({"type": "http.response.body", "body": EVENT, "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


# As the demo site's asgi.py: what start-up made is frozen out of the collector's sight.
gc.collect()
gc.freeze()
