"""Processes of the benchmarks: ASGI servers (Daphne or uvicorn) and what they cost.

Every HTTP figure is taken for Helix and for a bare app under the same server in the same run
(:mod:`bench.raw_asgi`); :func:`serve` starts either app under either server, and
:func:`cpu_seconds` reads what a process has spent from ``/proc``, as ops would.
"""

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


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time process ``pid`` has used (``/proc/<pid>/stat``), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15 of stat)


def cpus_idle(cpus: set[int] | None = None) -> tuple[float, float]:
    """Seconds elapsed and seconds idle so far, summed over ``cpus`` (all when ``None``), from
    ``/proc/stat``: two readings give the share of those CPUs that was busy between them."""
    elapsed = idle = 0.0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu" or (cpus is not None and int(name[3:]) not in cpus):
            continue
        ticks = [int(value) for value in values[:8]]
        elapsed += sum(ticks) / _TICKS
        idle += (ticks[3] + ticks[4]) / _TICKS  # idle, iowait
    return elapsed, idle


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")
