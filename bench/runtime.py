"""Benchmark of the agent runtime.

    bin/bench-runtime        # or: python -m bench.runtime --redis-url redis://...

1. Runtime overhead per chunk: a scripted run with no delays (the model streams a long answer)
   against the raw cost of writing the same chunks with the store's buffered writer.
2. Concurrency: one `celery -A helix_site worker` (the default threads pool and shared event
   loop) runs the scripted chat agent with 20 ms token delays, first alone, then 50 runs at
   once; every run's duration (queued to finished) is compared with the solo one.

Uses its own SQLite database file and the given Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tooling.site import setup_django

ROOT = Path(__file__).resolve().parent.parent


class MemoryRecorder:
    """A recorder that keeps everything in memory: the overhead figure measures the runtime, not SQLite."""

    def __init__(self) -> None:
        self.commits = 0

    async def load_session(self, session_id: str) -> Any:
        from streams.messages import StoredMessage
        from workers.runtime.persistence import SessionSnapshot

        return SessionSnapshot(session_id, "bench", [StoredMessage(role="user", content="Tell me everything.")], {})

    async def commit_step(self, *args: Any) -> tuple[str, int]:
        self.commits += 1
        return f"cp-{self.commits}", 2

    async def run_status(self, run_id: str) -> str:
        return "running"


async def bench_overhead(redis_url: str, tokens: int) -> tuple[float, float, int]:
    from streams.backends import RedisStreamManager
    from streams.protocol import TextDelta
    from workers.llm.scripted import ScriptedModel, ScriptedTurn
    from workers.runtime.agents import define_agent
    from workers.runtime.steps import RunLoop

    text = " ".join(f"word{i}" for i in range(tokens))
    agent = define_agent(
        "bench", "x", llm=ScriptedModel(lambda m: ScriptedTurn(text=text), delay=(0, 0)), register=False
    )
    streams = RedisStreamManager(redis_url, key_prefix=f"bench:{uuid.uuid4().hex[:8]}:")
    runtime_times, raw_times, chunk_count = [], [], 0
    for _ in range(3):
        session = uuid.uuid4().hex
        loop = RunLoop(agent, session_id=session, run_id="run", streams=streams, recorder=MemoryRecorder())  # type: ignore[arg-type]
        start = time.perf_counter()
        outcome = await loop.run()
        runtime_times.append(time.perf_counter() - start)
        assert outcome.status == "completed"
        chunk_count = (await streams.get_stream_info(session)).total_chunks  # type: ignore[union-attr]
        chunks = [
            TextDelta(agent_id="run", agent_type="bench", timestamp=1, delta=f"word{i} ") for i in range(chunk_count)
        ]
        raw_session = uuid.uuid4().hex
        writer = await streams.create_writer(raw_session, "run", "bench", buffered=True)
        start = time.perf_counter()
        for chunk in chunks:
            await writer.write(chunk)
        await writer.close()
        raw_times.append(time.perf_counter() - start)
    await streams.aclose()
    return statistics.median(runtime_times) / chunk_count, statistics.median(raw_times) / chunk_count, chunk_count


def start_worker(
    redis_url: str, database: Path, queue: str, log: Path, agent_modules: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """A Celery worker process on ``queue``, with the demo agents and ``agent_modules``."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "REDIS_URL": redis_url,
        "HELIX_STREAM_BACKEND": "redis",
        "HELIX_CELERY_QUEUE": queue,
        "HELIX_SCRIPTED_DELAY_MS": "20",
        "HELIX_AGENT_MODULES": ",".join(["workers.demo_agents", *(agent_modules or [])]),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "helix_site",
            "worker",
            "--loglevel=WARNING",
            "-n",
            f"{queue}@%h",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    time.sleep(4)
    if process.poll() is not None:
        raise RuntimeError(log.read_text())
    return process


async def bench_concurrency(redis_url: str, queue: str, runs: int) -> tuple[float, list[float]]:
    from chat.models import Run
    from chat.state.store import DjangoStateStore
    from helix_site.celery import app
    from streams.backends import RedisStreamManager
    from workers.executors import CeleryExecutor

    app.conf.CELERY_BROKER_URL = redis_url  # the namespaced key: an unprefixed one does not override it
    streams = RedisStreamManager(redis_url)
    executor = CeleryExecutor(DjangoStateStore(), streams, queue=queue, poll_interval=0.05)

    async def durations(handles: list[Any]) -> list[float]:
        for handle in handles:
            outcome = await handle.result(timeout=300)
            assert outcome.status == "completed", outcome
        rows = [await Run.objects.aget(pk=h.run_id) for h in handles]
        return [(row.finished_at - row.created_at).total_seconds() for row in rows if row.finished_at]

    solo = statistics.median(
        [(await durations([await executor.execute("chat", f"Solo question {i}")]))[0] for i in range(3)]
    )
    handles = await asyncio.gather(*(executor.execute("chat", f"Concurrent question {i}") for i in range(runs)))
    many = await durations(list(handles))
    await streams.aclose()
    return solo, many


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="helix-bench-"))
    database = workdir / "bench.sqlite3"
    setup_django(database, args.redis_url)

    per_chunk, raw_per_chunk, count = asyncio.run(bench_overhead(args.redis_url, args.tokens))
    print("| measure | runtime | raw store write | ratio | target |\n|---|---|---|---|---|")
    print(
        f"| cost per chunk, scripted run of {count:,} chunks, no delays (Redis, buffered writer) "
        f"| {per_chunk * 1e6:.1f} µs | {raw_per_chunk * 1e6:.1f} µs | {per_chunk / raw_per_chunk:.2f} | <= 2 |"
    )

    queue = f"bench-{uuid.uuid4().hex[:6]}"
    worker = start_worker(args.redis_url, database, queue, workdir / "worker.log")
    try:
        solo, many = asyncio.run(bench_concurrency(args.redis_url, queue, args.runs))
    finally:
        worker.terminate()
        worker.wait(30)
    worst = max(many)
    print("\n| measure | value | target |\n|---|---|---|")
    print(f"| chat run alone, 20 ms tokens (queued → finished, median of 3) | {solo:.2f} s | |")
    median = statistics.median(many)
    label = f"{args.runs} concurrent runs on one worker"
    print(f"| {label}: median duration | {median:.2f} s ({median / solo:.2f}x solo) | |")
    print(f"| {label}: slowest run | {worst:.2f} s ({worst / solo:.2f}x solo) | <= 1.5x |")


if __name__ == "__main__":
    main()
