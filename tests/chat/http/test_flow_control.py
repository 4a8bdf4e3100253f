"""Slow clients under a real server (Daphne, uvicorn): it waits for them, and drops one that stops reading."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from chat.models import ChatSession, Run
from streams.backends import RedisStreamManager
from streams.protocol import TextDelta
from tests.live import serve_site

pytestmark = pytest.mark.django_db(transaction=True)

STALL_TIMEOUT = 1.5
CHUNK_TEXT = "x" * 2000


@pytest.fixture(scope="module", params=["daphne", "uvicorn"])
def slow_server(request: pytest.FixtureRequest, test_database: str, redis_url: str) -> Iterator[int]:
    env = {
        "HELIX_STREAM_BACKEND": "redis",
        "REDIS_URL": redis_url,
        "DATABASE_URL": test_database,
        "HELIX_SLOW_CLIENT_TIMEOUT": str(STALL_TIMEOUT),
    }
    with serve_site(env, request.param) as port:
        yield port


def big_stream(redis_url: str, chunks: int) -> tuple[str, str]:
    """A session of a new user whose run streamed ``chunks`` text deltas of 2 KB each."""
    user = User.objects.create_user(f"slow-{uuid.uuid4().hex[:6]}", password="pw-slow")
    token = Token.objects.create(user=user).key
    session = ChatSession.objects.create(agent="chat", owner=user)
    Run.objects.create(session=session, agent="chat", status="running", message_id="m-1")

    async def write() -> None:
        manager = RedisStreamManager(redis_url)
        writer = await manager.create_writer(str(session.pk), "run-1", "chat", buffered=True)
        await writer.write_many(
            TextDelta(agent_id="run-1", timestamp=1, delta=f"<{i}>{CHUNK_TEXT}") for i in range(chunks)
        )
        await writer.close()
        await manager.aclose()

    asyncio.run(write())
    return str(session.pk), token


def end_stream(redis_url: str, session_id: str) -> None:
    async def end() -> None:
        manager = RedisStreamManager(redis_url)
        await manager.end_stream(session_id)
        await manager.aclose()

    asyncio.run(end())


def open_stream(port: int, session_id: str, token: str, receive_buffer: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET /api/chat/{session_id} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n\r\n".encode()
    )
    return sock


def read_to_close(sock: socket.socket, *, pause: float = 0.0, timeout: float = 20.0) -> tuple[bytes, bool]:
    """Everything the server sends until it closes (True) or ``timeout`` passes with the socket open."""
    sock.settimeout(0.5)
    received, deadline = bytearray(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            piece = sock.recv(1 << 16)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return bytes(received), True
        if not piece:
            return bytes(received), True
        received += piece
        if received.endswith(b"0\r\n\r\n"):
            return bytes(received), True  # the chunked body ended
        if pause:
            time.sleep(pause)
    return bytes(received), False


def test_a_client_that_stops_reading_is_dropped_without_the_server_buffering_its_stream(
    slow_server: int, redis_url: str
) -> None:
    chunks = 4000  # about 8 MB of events, more than every socket buffer on the way
    session_id, token = big_stream(redis_url, chunks)
    sock = open_stream(slow_server, session_id, token, receive_buffer=4096)
    time.sleep(STALL_TIMEOUT + 2.5)  # read nothing: the server pauses, then gives up on us
    received, closed = read_to_close(sock, timeout=10)
    sock.close()
    assert closed, "the server kept a client that read nothing for longer than the stall timeout"
    assert b"HTTP/1.1 200" in received
    assert len(received) < chunks * len(CHUNK_TEXT) / 2, f"the server wrote {len(received):,} bytes ahead"


def dechunked(response: bytes) -> bytes:
    """The body of a chunked HTTP/1.1 ``response`` as the client sees it (a server may split a
    body part into several chunks of the transfer encoding)."""
    rest, body = response.split(b"\r\n\r\n", 1)[1], bytearray()
    while rest:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            break
        body += rest[:size]
        rest = rest[size + 2 :]
    return bytes(body)


def test_a_slow_reader_gets_every_event_once_and_in_order(slow_server: int, redis_url: str) -> None:
    chunks = 1500
    session_id, token = big_stream(redis_url, chunks)
    sock = open_stream(slow_server, session_id, token, receive_buffer=8192)
    ender = threading.Timer(0.5, end_stream, (redis_url, session_id))  # the run ends while we lag behind
    ender.start()
    received, closed = read_to_close(sock, pause=0.002, timeout=60)
    ender.join()
    sock.close()
    assert closed, received[-300:]
    body = dechunked(received)
    numbers = [int(n) for n in re.findall(rb'"delta":"<(\d+)>', body)]
    assert numbers == list(range(chunks)), (sorted(set(range(chunks)) - set(numbers)), received[:300])
    assert b"data: [DONE]" in body
