"""A real ASGI server process (Daphne, or uvicorn) serving the site, for tests that go through
HTTP or a browser."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tooling.servers import free_port, server_command, stop

ROOT = Path(__file__).resolve().parent.parent


def http_request(
    port: int,
    method: str,
    path: str,
    *,
    body: bytes | dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    source: str = "127.0.0.1",
    timeout: float = 30,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request to the server on ``port``, from the loopback address ``source``: its
    status, headers (lower-case names) and whole body. A dict body is sent as JSON."""
    headers = dict(headers or {})
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    if body is not None:
        headers.setdefault("Content-Type", "application/json")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, output: Callable[[], str]) -> None:
    """Return once ``process`` listens on ``port``; if it exits or takes over 30 s, kill it and
    fail with the end of its ``output()``."""
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"{what} did not start:\n{output()[-3000:]}") from None
            time.sleep(0.05)


#: The ASGI servers Helix supports; Daphne is the default. gunicorn runs uvicorn workers, two
#: processes on one port.
SERVERS = ("daphne", "uvicorn", "gunicorn")


@contextmanager
def serve_site(env: dict[str, str], server: str = "daphne") -> Iterator[int]:
    """Run the site under ``server`` (Daphne unless told) on a free loopback port with ``env``
    added; yield the port once it listens."""
    port = free_port()
    process = subprocess.Popen(
        server_command(server, "helix_site.asgi:application", port),
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "helix_site.settings", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, process, server, lambda: process.stderr.read().decode() if process.stderr else "")
        yield port
    finally:
        stop(process)


def use_broker(url: str) -> str:
    """Point this process's Celery app at the broker ``url`` and return the one it used. The app
    reads its settings under the ``CELERY_`` namespace, which an unprefixed key such as
    ``broker_url`` does not override (Celery 5.6), so the prefixed key is set; the app's pooled
    connections to the previous broker are closed."""
    from helix_site.celery import app

    previous = str(app.conf.broker_url)
    app.conf.CELERY_BROKER_URL = url
    app.close()
    return previous


def start_celery_worker(env: dict[str, str], name: str, log_path: Path) -> subprocess.Popen[bytes]:
    """A ``celery -A helix_site worker`` process named ``name``; returns once it is ready."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "helix_site",
            "worker",
            "--loglevel=INFO",
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while "ready." not in log_path.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the Celery worker did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.1)
    return process


async def upload(port: int, head: str, body_parts: int, part: bytes) -> tuple[bytes, int]:
    """Send ``head`` and up to ``body_parts`` chunks of ``part`` (chunked encoding) while reading
    the answer, as an HTTP client does, and stop sending once it has come whole (by its
    ``Content-Length``, else the connection's end): the answer, and how many parts were sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def response() -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        return head + (await reader.readexactly(int(length.group(1))) if length else await reader.read())

    answer = asyncio.ensure_future(response())
    sent = 0
    try:
        writer.write(head.encode())
        frame = f"{len(part):x}\r\n".encode() + part + b"\r\n"
        while sent < body_parts and not answer.done():
            writer.write(frame)
            await asyncio.wait_for(writer.drain(), 10)
            sent += 1
            # A drain with room in the socket does not yield: give the reader its turn, or a server
            # that reads fast takes the whole body before this loop looks at the answer.
            await asyncio.sleep(0)
        if not answer.done():
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (OSError, TimeoutError):
        pass  # the server stopped reading
    try:
        return await asyncio.wait_for(answer, 10), sent
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return b"", sent
    finally:
        writer.close()


async def refuses_100_mb_uploads(port: int) -> int:
    """Check that the server on ``port`` refuses an unauthenticated 100 MiB chunked upload with a
    typed 413 before its end, and one that declares 100 MiB before any of it is sent; how many
    64 KiB parts of the first it took."""
    head = (
        f"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nTransfer-Encoding: chunked\r\n"
        "Content-Type: application/json\r\n\r\n"
    )
    answer, sent = await upload(port, head, 100 * 16, b"x" * 65536)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["code"] == "PAYLOAD_TOO_LARGE"
    assert sent < 100 * 16, "the whole body was taken before the refusal"
    declared = f"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {100 * 2**20}\r\n\r\n"
    answer, _ = await upload(port, declared, 0, b"")
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    return sent
