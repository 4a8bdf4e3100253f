"""Benchmark of stop: how long a user's stop takes to halt a run on a worker in another process.

    python -m bench.stop --redis-url redis://127.0.0.1:6379/15 --tries 20

One `celery -A helix_site worker` runs the agents below. Each try starts a run, waits until it is
inside its slow part — a tool that would take a minute, or a model that stalls after a word —
then stops it as the stop endpoint does (the run is marked interrupted in the database) and
times how long until the run's stream holds its `run_interrupted` chunk and has ended: what
every open stream of the run sees. The baseline is one round trip of the same store (the
`run_status` read the stop is noticed by): the figure is how many of those the stop costs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bench.runtime import start_worker
from streams.messages import StoredMessage
from tooling.site import setup_django
from workers.llm.base import LLM, LLMEvent, TextPiece, ToolDefinition
from workers.llm.scripted import ScriptedModel, ScriptedToolCall, ScriptedTurn
from workers.runtime.agents import define_agent, define_tool


class Nothing(BaseModel):
    pass


async def _a_minute(_: Nothing, __: Any) -> str:
    await asyncio.sleep(60)
    return "done"


def _call_the_tool(messages: list[StoredMessage]) -> ScriptedTurn:
    if messages[-1].role == "tool":
        return ScriptedTurn(text="Done.")
    return ScriptedTurn(text="Looking. ", tool_calls=[ScriptedToolCall("a_minute", {})])


class _Stalls(LLM):
    async def stream(
        self, system_prompt: str, messages: list[StoredMessage], tools: list[ToolDefinition]
    ) -> AsyncIterator[LLMEvent]:
        yield TextPiece("Thinking")
        await asyncio.sleep(60)


define_agent(
    "bench-slow-tool",
    "x",
    tools=[define_tool("a_minute", "Takes a minute.", Nothing, _a_minute)],
    llm=ScriptedModel(_call_the_tool, delay=(0, 0)),
)
define_agent("bench-stalls", "x", llm=_Stalls())


async def measure(redis_url: str, queue: str, agent: str, tries: int) -> tuple[list[float], list[float]]:
    from chat.models import Run
    from chat.state.store import DjangoStateStore
    from helix_site.celery import app
    from streams.backends import RedisStreamManager
    from streams.protocol import RunInterrupted, TextDelta
    from workers.executors import CeleryExecutor

    app.conf.CELERY_BROKER_URL = redis_url  # the namespaced key: an unprefixed one does not override it
    store, streams = DjangoStateStore(), RedisStreamManager(redis_url)
    executor = CeleryExecutor(store, streams, queue=queue, poll_interval=0.05)
    stops, round_trips = [], []
    for _ in range(tries):
        handle = await executor.execute(agent, "go")
        deadline = time.monotonic() + 30
        while not any(isinstance(c, TextDelta) for c, _ in await streams.get_all_chunks(handle.session_id)):
            assert time.monotonic() < deadline, "the run never started"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # inside the tool call, or the stalled model call
        started = time.perf_counter()
        await store.request_stop(handle.session_id)
        while True:
            info = await streams.get_stream_info(handle.session_id)
            if info is not None and info.status == "ended":
                break
            assert time.perf_counter() - started < 30, "the stop never landed"
            await asyncio.sleep(0.005)
        stops.append(time.perf_counter() - started)
        chunks = [c for c, _ in await streams.get_all_chunks(handle.session_id)]
        assert isinstance(chunks[-1], RunInterrupted), chunks[-1]
        assert (await Run.objects.aget(pk=handle.run_id)).status == "interrupted"
        started = time.perf_counter()
        await store.run_status(handle.run_id)
        round_trips.append(time.perf_counter() - started)
    await streams.aclose()
    return stops, round_trips


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--tries", type=int, default=20)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="helix-bench-"))
    database = workdir / "bench.sqlite3"
    setup_django(database, args.redis_url)
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    worker = start_worker(args.redis_url, database, queue, workdir / "worker.log", agent_modules=["bench.stop"])
    print("| stop while | p50 | p95 | max | store round trip p50 | p95 / round trip | target |")
    print("|---|---|---|---|---|---|---|")
    try:
        for agent, where in (("bench-slow-tool", "a tool runs"), ("bench-stalls", "the model stalls")):
            stops, trips = asyncio.run(measure(args.redis_url, queue, agent, args.tries))
            stops.sort()
            p95 = stops[max(0, round(0.95 * len(stops)) - 1)]
            trip = statistics.median(trips)
            print(
                f"| {where} | {statistics.median(stops) * 1000:.0f} ms | {p95 * 1000:.0f} ms "
                f"| {stops[-1] * 1000:.0f} ms | {trip * 1000:.2f} ms | {p95 / trip:.0f}x | p95 <= 1 s |"
            )
    finally:
        worker.terminate()
        worker.wait(30)


if __name__ == "__main__":
    main()
