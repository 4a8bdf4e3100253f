"""The server processes that tests and benchmarks run against: an ASGI application under Daphne,
uvicorn, or gunicorn with uvicorn workers, started as ops would start it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
SERVERS = ("daphne", "uvicorn")
#: Listen backlog: a reconnect storm is thousands of connections at once.
BACKLOG = 8192
#: Processes of a gunicorn server (each a uvicorn worker on the same port).
GUNICORN_WORKERS = 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, cwd=ROOT, env={**os.environ, **env}, stdout=log.open("w"), stderr=subprocess.STDOUT)


def server_command(server: str, app: str, port: int) -> list[str]:
    """The command line serving ASGI ``app`` on ``port`` under ``server``, as ops would run it."""
    if server == "daphne":
        return [
            sys.executable,
            "-m",
            "daphne",
            "--endpoint",
            f"tcp:port={port}:interface={HOST}:backlog={BACKLOG}",
            app,
        ]
    if server == "uvicorn":
        return [
            sys.executable,
            "-m",
            "uvicorn",
            app,
            "--host",
            HOST,
            "--port",
            str(port),
            "--backlog",
            str(BACKLOG),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--lifespan",
            "off",
            "--no-access-log",
            "--log-level",
            "warning",
        ]
    if server == "gunicorn":  # gunicorn with uvicorn workers: a common production setup
        return [
            sys.executable,
            "-m",
            "gunicorn",
            app,
            "--worker-class",
            "uvicorn_worker.UvicornWorker",
            "--workers",
            str(GUNICORN_WORKERS),
            "--bind",
            f"{HOST}:{port}",
            "--backlog",
            str(BACKLOG),
            "--log-level",
            "warning",
        ]
    raise ValueError(f"unknown server {server!r} (one of {', '.join(SERVERS)})")


def serve(server: str, app: str, env: dict[str, str], log: Path) -> tuple[int, subprocess.Popen[bytes]]:
    """``app`` under ``server`` on a free port; the port and the process (not yet listening)."""
    port = free_port()
    return port, start(server_command(server, app, port), env, log)


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def stop(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
