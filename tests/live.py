"""A real Daphne process serving the site, for tests that go through HTTP or a browser."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.http import stop

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


@contextmanager
def daphne(env: dict[str, str]) -> Iterator[int]:
    """Run Daphne on a free loopback port with ``env`` added; yield the port once it listens."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "helix_site.asgi:application"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "helix_site.settings", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, process, "daphne", lambda: process.stderr.read().decode() if process.stderr else "")
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
