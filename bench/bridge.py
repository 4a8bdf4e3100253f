"""Benchmark of the AI SDK bridge.

    python -m bench.bridge [--chunks 100000] [--redis-url redis://...]

1. Transform + SSE-encode throughput: a realistic run (mostly text deltas, some reasoning and
   tool calls) through ``StreamTransformer`` and ``ui_message_stream``, next to plain
   ``json.dumps`` + SSE framing of the same chunks' wire dicts, with the ratio.
2. ``build_snapshot`` of a session of 1,000 messages with 200 tool calls: finished, and with a
   run in flight (content replay on and off), on the in-memory stream store and on Redis when a
   URL is given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import AsyncIterator

from chat.ai_sdk.snapshot import SnapshotDeps, build_snapshot
from chat.ai_sdk.sse import ui_message_stream
from chat.ai_sdk.state import InMemoryStateStore, RunInfo
from chat.ai_sdk.transformer import StreamTransformer
from streams.backends import InMemoryStreamManager, RedisStreamManager, StreamManager
from streams.messages import StoredMessage, ToolCall
from streams.protocol import Chunk, StoredChunk, TextDelta, Thinking, ToolEnd, ToolStart, dump_chunk, stored_chunks

AGENT = "run-7f3a9c2e51d0"


def run_chunks(count: int) -> list[Chunk]:
    """A run: per 50 chunks, 5 reasoning pieces, 40 text deltas, then a tool call and result."""
    chunks: list[Chunk] = []
    call = 0
    while len(chunks) < count:
        chunks += [
            Thinking(agent_id=AGENT, timestamp=1, content="thinking about it ", is_complete=False) for _ in range(5)
        ]
        chunks += [TextDelta(agent_id=AGENT, timestamp=1, delta="some streamed words ") for _ in range(40)]
        call += 1
        arguments = {"query": "order status", "limit": 5}
        chunks.append(
            ToolStart(agent_id=AGENT, timestamp=1, tool_call_id=f"c{call}", tool_name="search", arguments=arguments)
        )
        chunks.append(
            ToolEnd(agent_id=AGENT, timestamp=1, tool_call_id=f"c{call}", result={"hits": [1, 2, 3]}, success=True)
        )
        chunks += [TextDelta(agent_id=AGENT, timestamp=1, delta="after the tool ") for _ in range(3)]
    return chunks[:count]


async def bench_transform(count: int) -> tuple[float, float, int]:
    chunks = run_chunks(count)
    pairs = stored_chunks(chunks, 1)
    wire = [dump_chunk(chunk) for chunk in chunks]

    def plain() -> float:
        start = time.perf_counter()
        out = [
            b"data: " + json.dumps(item, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode() + b"\n\n"
            for item in wire
        ]
        elapsed = time.perf_counter() - start
        assert len(out) == count
        return elapsed

    async def ours() -> tuple[float, int]:
        async def pages() -> AsyncIterator[list[StoredChunk]]:
            for offset in range(0, count, 1000):
                yield pairs[offset : offset + 1000]

        start = time.perf_counter()
        size = 0
        async for part in ui_message_stream(pages(), StreamTransformer(message_id="m")):
            size += len(part)
        return time.perf_counter() - start, size

    plain_time = statistics.median([plain() for _ in range(5)])
    results = [await ours() for _ in range(5)]
    ours_time = statistics.median([t for t, _ in results])
    return count / ours_time, count / plain_time, results[0][1]


def session_messages(total: int = 1000, tool_calls: int = 200) -> list[StoredMessage]:
    messages: list[StoredMessage] = []
    calls = 0
    turn = 0
    while len(messages) < total:
        turn += 1
        messages.append(StoredMessage(role="user", id=f"u{turn}", content="Where is my order? " * 5))
        if calls < tool_calls:
            calls += 1
            call = ToolCall(id=f"call-{calls}", name="lookup_order", arguments={"order": calls, "fields": ["status"]})
            messages.append(
                StoredMessage(
                    role="assistant", id=f"m{turn}", content="Let me check.", reasoning="Look it up.", tool_calls=[call]
                )
            )
            messages.append(
                StoredMessage(role="tool", tool_call_id=call.id, content=json.dumps({"status": "shipped", "eta": 2}))
            )
        messages.append(
            StoredMessage(role="assistant", id=f"m{turn}", content="It shipped and arrives in two days. " * 4)
        )
    return messages[:total]


async def bench_snapshot(manager: StreamManager, label: str) -> list[tuple[str, float]]:
    session = f"bench-{uuid.uuid4().hex[:8]}"
    store = InMemoryStateStore()
    store.create_session(session, state={"notes": ["x"] * 20})
    messages = session_messages()
    assert sum(len(m.tool_calls) for m in messages) == 200 and len(messages) == 1000
    store.append_messages(session, messages)
    writer = await manager.create_writer(session, AGENT, buffered=True)
    await writer.write_many(run_chunks(2000))
    await writer.flush()
    info = await manager.get_stream_info(session)
    assert info is not None
    in_flight = run_chunks(300)
    start_sequence = info.latest_sequence
    await writer.write_many(in_flight)
    await writer.close()
    rows = []

    async def measure(name: str, deps: SnapshotDeps) -> None:
        async def once() -> float:
            begin = time.perf_counter()
            snapshot = await build_snapshot(deps, session)
            assert snapshot is not None and len(snapshot.messages) > 300
            return time.perf_counter() - begin

        await once()
        rows.append(
            (
                f"build_snapshot, 1,000 messages / 200 tool calls, {name} ({label})",
                statistics.median([await once() for _ in range(30)]),
            )
        )

    run = RunInfo("run", "running", start_sequence, 0, "m-live", len(messages))
    store.set_run(session, run)
    await measure("run in flight, content replay", SnapshotDeps(store, manager, True))
    await measure("run in flight, -partial message", SnapshotDeps(store, manager, False))
    store.set_run(session, RunInfo("run", "completed", start_sequence, 1, "m-live", len(messages)))
    await manager.end_stream(session)
    await measure("finished", SnapshotDeps(store, manager, True))
    await manager.delete_stream(session)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--redis-url", default=None, help="also measure snapshots on this Redis")
    args = parser.parse_args()

    ours, plain, size = asyncio.run(bench_transform(args.chunks))
    print("| measure | helix | plain json.dumps + SSE | ratio | target |\n|---|---|---|---|---|")
    print(
        f"| transform + SSE-encode {args.chunks:,} chunks ({size / args.chunks:.0f} B/chunk out) "
        f"| {ours:,.0f}/s | {plain:,.0f}/s | {ours / plain:.2f} | >= 0.30 |"
    )

    async def snapshots() -> list[tuple[str, float]]:
        rows = await bench_snapshot(InMemoryStreamManager(), "memory streams")
        if args.redis_url:
            manager = RedisStreamManager(args.redis_url, key_prefix=f"bench:{uuid.uuid4().hex[:8]}:")
            rows += await bench_snapshot(manager, "Redis streams")
            await manager.aclose()
        return rows

    print("\n| measure | median | target |\n|---|---|---|")
    for name, seconds in asyncio.run(snapshots()):
        print(f"| {name} | {seconds * 1e3:.1f} ms | <= 50 ms |")


if __name__ == "__main__":
    main()
