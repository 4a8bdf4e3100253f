"""The production topology on loopback, to inject faults into: its own Redis (restartable, with or
without persistence), two Daphne processes, two Celery workers and Celery beat (the reaper), all
on the test database; and chat clients that speak raw HTTP/1.1, so that a client that hangs is
seen hanging rather than hidden by a library's timeout.

Used by ``tests/chaos/test_faults.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.live import ROOT, start_celery_worker, wait_for_port
from tooling.servers import free_port
from tooling.servers import stop as stop_processes


class RedisServer:
    """A ``redis-server`` on a free port that can be killed and started again on the same port,
    with its data on disk (``appendfsync always``) or in memory only."""

    def __init__(self, *, persistence: bool) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="helix-chaos-redis-"))
        self.persistence = persistence
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        durable = ["--appendonly", "yes", "--appendfsync", "always"] if self.persistence else ["--appendonly", "no"]
        log = self.dir / "redis.log"
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.dir),
                "--save",
                "",
                *durable,
                "--logfile",
                str(log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        log.touch()
        wait_for_port(self.port, self.process, "redis-server", log.read_text)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed beyond what ``appendfsync`` already wrote."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def restart(self, down: float) -> None:
        self.kill()
        time.sleep(down)
        self.start()

    def cli(self, *args: str) -> str:
        done = subprocess.run(["redis-cli", "-p", str(self.port), *args], check=True, capture_output=True, text=True)
        return done.stdout.strip()

    def fill_up(self) -> None:
        """Redis full: its memory limit set below what it uses, with no eviction, so every write
        that needs memory is refused (``OOM command not allowed``) until :meth:`unlimit`."""
        info = dict(line.split(":", 1) for line in self.cli("info", "memory").splitlines() if ":" in line)
        self.cli("config", "set", "maxmemory-policy", "noeviction")
        self.cli("config", "set", "maxmemory", str(int(info["used_memory"]) // 2))

    def unlimit(self) -> None:
        self.cli("config", "set", "maxmemory", "0")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def rss_kib(pid: int) -> int:
    """The resident memory of process ``pid`` (``VmRSS``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


class Topology:
    """Redis, ``daphnes`` Daphne processes, ``workers`` Celery workers and Celery beat on the
    database at ``database_url``: the demo site as ops would run it."""

    def __init__(
        self,
        database_url: str,
        *,
        persistence: bool = False,
        daphnes: int = 2,
        workers: int = 2,
        delay_ms: str = "20",
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.redis = RedisServer(persistence=persistence)
        self.queue = f"chaos-{uuid.uuid4().hex[:8]}"
        self.logs = Path(tempfile.mkdtemp(prefix="helix-chaos-"))
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "helix_site.settings",
            "REDIS_URL": self.redis.url,
            "HELIX_STREAM_BACKEND": "redis",
            "HELIX_EXECUTOR": "celery",
            "DATABASE_URL": database_url,
            "HELIX_CELERY_QUEUE": self.queue,
            "HELIX_SCRIPTED_DELAY_MS": delay_ms,
            "HELIX_WORKER_CONCURRENCY": "20",
            "HELIX_CHAT_RATE": "100000/minute",
            "HELIX_AGENT_MODULES": "workers.demo_agents,tests.agents",
            **(extra_env or {}),
        }
        self.daphne_count, self.worker_count = daphnes, workers
        self.daphnes: list[tuple[int, subprocess.Popen[bytes]]] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self.beat: subprocess.Popen[bytes] | None = None
        self.warmed: set[int] = set()  # web processes a memory check has warmed up already

    def start(self) -> None:
        self.redis.start()
        self.workers = [self._start_worker(index) for index in range(self.worker_count)]
        self.beat = self._start_beat()
        for index in range(self.daphne_count):
            self.daphnes.append(self._start_daphne(index))

    def _start_worker(self, index: int) -> subprocess.Popen[bytes]:
        return start_celery_worker(self.env, f"{self.queue}-{index + 1}", self.logs / f"worker-{index + 1}.log")

    def _start_beat(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "helix_site",
                "beat",
                "--loglevel=INFO",
                "-s",
                str(self.logs / "beat-schedule"),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=(self.logs / "beat.log").open("a"),
            stderr=subprocess.STDOUT,
        )

    def revive(self) -> None:
        """Start again whatever process exited (a test that let one die has failed already), so
        that one failure does not fail every later test of the topology too."""
        self.workers = [
            self._start_worker(index) if process.poll() is not None else process
            for index, process in enumerate(self.workers)
        ]
        if self.beat is not None and self.beat.poll() is not None:
            self.beat = self._start_beat()
        for index, (port, process) in enumerate(self.daphnes):
            if process.poll() is not None:
                self.daphnes[index] = self._start_daphne(index, port)

    def restart_daphne(self, index: int, down: float) -> None:
        """SIGKILL web process ``index`` and start it again on its port ``down`` seconds later."""
        port, process = self.daphnes[index]
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        time.sleep(down)
        self.daphnes[index] = self._start_daphne(index, port)

    def _start_daphne(self, index: int, port: int | None = None) -> tuple[int, subprocess.Popen[bytes]]:
        port = port or free_port()
        log = self.logs / f"daphne-{index + 1}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "helix_site.asgi:application"],
            cwd=ROOT,
            env=self.env,
            stdout=log.open("a"),
            stderr=subprocess.STDOUT,
        )
        wait_for_port(port, process, "daphne", log.read_text)
        return port, process

    @property
    def ports(self) -> list[int]:
        return [port for port, _ in self.daphnes]

    def manage(self, *args: str) -> str:
        """Run ``manage.py`` with ``args`` as another process of the site (its settings, its
        database, its stream store); its output."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def dead_processes(self) -> list[str]:
        """The processes of the topology that exited (none should)."""
        named = [(f"worker-{i + 1}", p) for i, p in enumerate(self.workers)]
        named += [(f"daphne-{i + 1}", p) for i, (_, p) in enumerate(self.daphnes)]
        named += [("beat", self.beat)] if self.beat is not None else []
        return [name for name, process in named if process.poll() is not None]

    def daphne_rss_kib(self) -> list[int]:
        return [rss_kib(process.pid) for _, process in self.daphnes]

    def log_tail(self, size: int = 3000) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-size:]}" for p in sorted(self.logs.glob("*.log"))
        )

    def log_lines_about(self, *ids: str, limit: int = 60) -> str:
        """The processes' log lines that name any of ``ids`` (sessions, runs), by log."""
        found = []
        for path in sorted(self.logs.glob("*.log")):
            lines = [line for line in path.read_text(errors="replace").splitlines() if any(i in line for i in ids)]
            if lines:
                found.append(f"== {path.name}\n" + "\n".join(lines[-limit:]))
        return "\n".join(found) or "(no log line names them)"

    def check_alive(self) -> None:
        """Fail, naming the processes that exited and ending with their logs, if any did."""
        dead = self.dead_processes()
        tails = "\n".join(
            f"== {name}.log\n{(self.logs / f'{name}.log').read_text(errors='replace')[-6000:]}" for name in dead
        )
        assert dead == [], f"{dead} exited\n{tails}"

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))

    def stop(self) -> None:
        stop_processes(*self.workers, *(p for _, p in self.daphnes), *([self.beat] if self.beat else []))
        self.redis.stop()


# -- clients ---------------------------------------------------------------------------------------


@dataclass
class ChatResult:
    """How one chat request ended, as its client saw it."""

    status: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False  # the body ended with ``data: [DONE]``
    closed: bool = False  # the response ended (cleanly or not)
    ended_at: float = 0.0  # time.monotonic() when it ended
    body: bytes = b""

    @property
    def text(self) -> str:
        return "".join(e.get("delta", "") for e in self.events if e.get("type") == "text-delta")

    @property
    def finished(self) -> bool:
        return any(e.get("type") == "finish" for e in self.events)

    @property
    def ids(self) -> list[int]:
        """The SSE event ids (stream sequences) the response carried."""
        text = self.body.decode(errors="replace")
        return [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]

    @property
    def errors(self) -> list[str]:
        return [str(e.get("errorText")) for e in self.events if e.get("type") == "error"]


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> Any:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return
            yield await reader.readexactly(size)
            await reader.readexactly(2)
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while part := await reader.read(65536):
            yield part


async def request(
    port: int,
    method: str,
    path: str,
    *,
    token: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> ChatResult:
    """One request to the Daphne on ``port`` (a JSON ``body``, or ``raw`` bytes), read to its end
    (or until the connection breaks)."""
    result = ChatResult()
    payload = raw if raw is not None else b"" if body is None else json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Authorization: Token {token}"]
    lines += [f"Content-Length: {len(payload)}", "Content-Type: application/json", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        result.closed, result.ended_at = True, time.monotonic()
        return result
    try:
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        await writer.drain()
        result.status, response_headers = await _read_head(reader)
        async for part in _body(reader, response_headers):
            result.body += part
    except (OSError, asyncio.IncompleteReadError, ValueError):
        pass  # the connection broke: what arrived is what the client saw
    finally:
        result.closed, result.ended_at = True, time.monotonic()
        writer.close()
    text = result.body.decode(errors="replace")
    result.done = text.endswith("data: [DONE]\n\n")
    for block in text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                try:
                    result.events.append(json.loads(line[6:]))
                except ValueError:
                    pass
    return result


def chat_body(text: str, session_id: str, agent: str = "chat") -> dict[str, Any]:
    return {
        "id": session_id,
        "agent": agent,
        "messages": [{"id": f"u-{uuid.uuid4().hex[:8]}", "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message",
    }


async def chat(
    port: int, token: str, text: str, *, agent: str = "chat", session_id: str | None = None
) -> tuple[str, ChatResult]:
    """POST a new message to a new session (``session_id``, or a fresh one) and read its stream to the end."""
    session_id = session_id or str(uuid.uuid4())
    return session_id, await request(
        port, "POST", f"/api/chat/{session_id}", token=token, body=chat_body(text, session_id, agent)
    )
