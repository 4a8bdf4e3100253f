"""Real Celery workers to kill: a pool that keeps N worker processes and a reaper running.

Used by the crash tests and by ``python -m tests.chaos.crash`` (the figures of many kills).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from tests.live import start_celery_worker

ROOT = Path(__file__).resolve().parent.parent.parent


class WorkerPool:
    """``size`` Celery workers on one queue plus ``manage.py reap_runs --loop``, all real processes."""

    def __init__(self, database_url: str, redis_url: str, *, size: int = 2, delay_ms: str = "15") -> None:
        self.queue = f"chaos-{uuid.uuid4().hex[:8]}"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "helix_site.settings",
            "REDIS_URL": redis_url,
            "HELIX_STREAM_BACKEND": "redis",
            "DATABASE_URL": database_url,
            "HELIX_CELERY_QUEUE": self.queue,
            "HELIX_SCRIPTED_DELAY_MS": delay_ms,
            "HELIX_WORKER_CONCURRENCY": "20",
        }
        self.size = size
        self.logs = Path(tempfile.mkdtemp(prefix="helix-chaos-"))
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        self.reaper: subprocess.Popen[bytes] | None = None
        self._count = 0

    def start(self) -> None:
        for _ in range(self.size):
            self.add_worker()
        self.reaper = subprocess.Popen(
            [sys.executable, "manage.py", "reap_runs", "--loop"],
            cwd=ROOT,
            env=self.env,
            stdout=(self.logs / "reaper.log").open("w"),
            stderr=subprocess.STDOUT,
        )

    def add_worker(self) -> int:
        self._count += 1
        log = self.logs / f"worker-{self._count}.log"
        process = start_celery_worker(self.env, f"{self.queue}-{self._count}", log)
        self.workers[process.pid] = process
        return process.pid

    def kill(self, pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL: a crash, SIGTERM: a clean shutdown) to worker ``pid``, wait for it
        to exit, and start a replacement, so ``size`` stay alive."""
        process = self.workers.pop(pid)
        os.kill(pid, sig)
        process.wait(60)
        self.add_worker()

    def log_tail(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.logs.glob("*.log")))

    def stop(self) -> None:
        for process in [*self.workers.values(), *([self.reaper] if self.reaper else [])]:
            process.terminate()
        for process in [*self.workers.values(), *([self.reaper] if self.reaper else [])]:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
