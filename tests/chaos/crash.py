"""Kill the worker running a run, and check what survives.

    python -m tests.chaos.crash --kills 20      # figures: survived kills, lost/duplicated messages,
                                               # worker death → first chunk of the takeover

Starts its own SQLite database file and worker pool (needs ``HELIX_TEST_REDIS_URL`` or
``--redis-url``). Each round runs the ``research`` demo agent (a sub-agent, tools, state, three
steps), SIGKILLs the worker holding it at a random moment, and compares the session with an
uncrashed reference run of the same question.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from tests.chaos.harness import WorkerPool

QUESTION = "How do resumable streams survive a crash?"


@dataclass
class Round:
    killed: bool
    completed: bool
    resynced: bool
    same_messages: bool
    duplicates: int
    lost: int
    notes: int
    takeover_seconds: float | None
    attempts: int
    superseded: bool = False


def conversation(messages: list[Any]) -> list[tuple[Any, ...]]:
    """The session's messages without their random ids."""
    return [(m.role, m.content, m.reasoning, [(c.name, c.arguments) for c in m.tool_calls]) for m in messages]


async def run_once(pool: WorkerPool | None, executor: Any, kill_after: float | None) -> tuple[str, float | None]:
    """Start a run; with ``kill_after``, SIGKILL its worker then. Returns (run id, kill time)."""
    from chat.models import Run

    handle = await executor.execute("research", QUESTION)
    killed_at = None
    if pool is not None and kill_after is not None:
        await asyncio.sleep(kill_after)
        run = await Run.objects.aget(pk=handle.run_id)
        pid = int(run.worker.split(":")[1]) if run.status == "running" and run.worker else None
        if pid in pool.workers:
            killed_at = time.time()
            await asyncio.to_thread(pool.kill, pid)
    await handle.result(timeout=120)
    return handle.run_id, killed_at


async def inspect(run_id: str, killed_at: float | None, reference: list[tuple[Any, ...]], streams: Any) -> Round:
    from chat.models import Message, Run
    from streams.protocol import ExecutorSuperseded, StreamResync

    run = await Run.objects.select_related("session").aget(pk=run_id)
    stored = [m async for m in Message.objects.filter(session_id=run.session_id).order_by("position")]
    positions = [m.position for m in stored]
    chunks = await streams.get_all_chunks(str(run.session_id))
    resyncs = [c for c, _ in chunks if isinstance(c, StreamResync)]
    takeover = resyncs[0].timestamp / 1000 - killed_at if resyncs and killed_at else None
    return Round(
        killed=killed_at is not None,
        completed=run.status == "completed",
        resynced=bool(resyncs),
        same_messages=conversation([m.to_stored() for m in stored]) == reference,
        duplicates=(len(positions) - len(set(positions))) + max(0, len(stored) - len(reference)),
        lost=max(0, len(reference) - len(stored)),
        notes=len(run.session.state.get("notes", [])),
        takeover_seconds=takeover,
        attempts=run.attempt,
        superseded=any(isinstance(c, ExecutorSuperseded) and c.current_epoch > c.epoch for c, _ in chunks),
    )


async def reference_conversation(executor: Any) -> list[tuple[Any, ...]]:
    from chat.models import Message, Run

    run_id, _ = await run_once(None, executor, None)
    run = await Run.objects.aget(pk=run_id)
    return conversation(
        [m.to_stored() async for m in Message.objects.filter(session_id=run.session_id).order_by("position")]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    import tempfile
    from pathlib import Path

    from tooling.site import setup_django

    redis_url = args.redis_url or os.environ["HELIX_TEST_REDIS_URL"]
    database = Path(tempfile.mkdtemp(prefix="helix-chaos-db-")) / "chaos.sqlite3"
    setup_django(database, redis_url)
    from tests.live import use_broker

    use_broker(redis_url)
    pool = WorkerPool(f"sqlite:///{database}", redis_url)
    pool.start()
    rng = random.Random(args.seed)
    try:
        rounds = asyncio.run(_rounds(pool, rng, args.kills))
    finally:
        pool.stop()
    killed = [r for r in rounds if r.killed]
    survived = [
        r for r in killed if r.completed and r.same_messages and not r.duplicates and not r.lost and r.notes == 1
    ]
    takeovers = [r.takeover_seconds for r in killed if r.takeover_seconds is not None]
    print(f"kills survived / attempted: {len(survived)} / {len(killed)} ({len(rounds)} rounds)")
    print(f"runs whose messages differ from the reference: {sum(not r.same_messages for r in rounds)}")
    print(
        f"duplicated messages: {sum(r.duplicates for r in rounds)}; lost messages: {sum(r.lost for r in rounds)}; "
        f"tool re-executions: {sum(r.notes != 1 for r in rounds)}"
    )
    if takeovers:
        print(
            f"worker death -> first takeover chunk: p50 {statistics.median(takeovers):.2f} s, "
            f"max {max(takeovers):.2f} s over {len(takeovers)} takeovers"
        )


async def _rounds(pool: WorkerPool, rng: random.Random, kills: int) -> list[Round]:
    from chat.state.store import DjangoStateStore
    from streams.backends import RedisStreamManager
    from workers.executors import CeleryExecutor

    streams = RedisStreamManager(os.environ["REDIS_URL"])
    executor = CeleryExecutor(DjangoStateStore(), streams, queue=pool.queue)
    reference = await reference_conversation(executor)
    rounds = []
    for index in range(kills):
        run_id, killed_at = await run_once(pool, executor, rng.uniform(0.1, 2.5))
        rounds.append(await inspect(run_id, killed_at, reference, streams))
        print(f"round {index + 1}: {rounds[-1]}", flush=True)
    await streams.aclose()
    return rounds


if __name__ == "__main__":
    main()
