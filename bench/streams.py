"""Benchmark of the Helix stream store next to raw redis-py, on the same Redis, in the same run.

    bin/bench                    # starts a throwaway Redis, runs everything (about two minutes)
    python -m bench.streams --redis-url redis://127.0.0.1:6379/15 [--chunks 100000] [--quick]

Measures, each beside the raw redis-py operation it stands on and their ratio:
ingest rate of one writer (one chunk at a time, and buffered), reading a whole 10,000-chunk
stream, time to the first chunk when resuming from the middle of a long stream, write-to-reader
latency across processes at 1,000 events/s with 1 and with 1,000 tailing readers, and the Redis
connections those readers hold. Raw figures use redis-py with hiredis, sync and asyncio; ratios
are taken against the faster of the two.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aredis

from streams.backends import RedisStreamManager
from streams.protocol import TextDelta, encode_chunk, now_ms

FILLER = "Helix streams every token of an agent run through Redis so that clients can resume. "


def make_chunk(i: int, delta: str | None = None) -> TextDelta:
    """A text_delta chunk of about 150 bytes on the wire."""
    text = delta if delta is not None else f"{i:08d} {FILLER[:60]}"
    return TextDelta(agent_id="run-7f3a9c2e51d0", agent_type="assistant", timestamp=now_ms(), delta=text)


@dataclass
class Row:
    measure: str
    helix: float
    raw: float
    unit: str
    higher_is_better: bool
    target: str = ""

    @property
    def ratio(self) -> float:
        if self.higher_is_better:
            return self.helix / self.raw if self.raw else 0.0
        return self.helix / self.raw if self.raw else float("inf")


def fmt(value: float, unit: str) -> str:
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "ms":
        return f"{value:.3f} ms"
    return f"{value:,.0f}"


def print_table(rows: list[Row]) -> None:
    header = f"| {'measure':<58} | {'helix':>13} | {'raw redis-py':>13} | {'ratio':>6} | target |"
    print(header)
    print("|" + "-" * 60 + "|" + "-" * 15 + "|" + "-" * 15 + "|" + "-" * 8 + "|--------|")
    for row in rows:
        ratio = f"{row.ratio:.2f}" if row.raw else "-"
        print(
            f"| {row.measure:<58} | {fmt(row.helix, row.unit):>13} | {fmt(row.raw, row.unit):>13} "
            f"| {ratio:>6} | {row.target} |"
        )


async def timed(action: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await action()
    return time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- ingest ----------------------------------------------------------------------------------


async def bench_ingest(url: str, count: int, prefix: str) -> tuple[list[Row], str]:
    chunks = [make_chunk(i) for i in range(count)]
    payloads = [encode_chunk(c)[1] for c in chunks]
    sync = redis.Redis.from_url(url)
    client = aredis.Redis.from_url(url)

    def raw_sync_one() -> float:
        key = f"{prefix}raw-sync-one"
        start = time.perf_counter()
        for payload in payloads:
            sync.xadd(key, {"c": payload})
        return count / (time.perf_counter() - start)

    async def raw_async_one() -> float:
        key = f"{prefix}raw-async-one"
        start = time.perf_counter()
        for payload in payloads:
            await client.xadd(key, {"c": payload})
        return count / (time.perf_counter() - start)

    def raw_pipelined(size: int) -> float:
        key = f"{prefix}raw-pipe-{size}"
        start = time.perf_counter()
        for offset in range(0, count, size):
            pipe = sync.pipeline(transaction=False)
            for payload in payloads[offset : offset + size]:
                pipe.xadd(key, {"c": payload})
            pipe.execute()
        return count / (time.perf_counter() - start)

    async def raw_async_pipelined(size: int) -> float:
        key = f"{prefix}raw-apipe-{size}"
        start = time.perf_counter()
        for offset in range(0, count, size):
            pipe = client.pipeline(transaction=False)
            for payload in payloads[offset : offset + size]:
                pipe.xadd(key, {"c": payload})
            await pipe.execute()
        return count / (time.perf_counter() - start)

    manager = RedisStreamManager(url, key_prefix=prefix)

    async def helix_one() -> float:
        writer = await manager.create_writer("ingest-one", "run-7f3a9c2e51d0")
        start = time.perf_counter()
        for chunk in chunks:
            await writer.write(chunk)
        return count / (time.perf_counter() - start)

    async def helix_buffered() -> float:
        writer = await manager.create_writer("ingest-buffered", "run-7f3a9c2e51d0", buffered=True)
        start = time.perf_counter()
        for chunk in chunks:
            await writer.write(chunk)
        await writer.close()
        return count / (time.perf_counter() - start)

    raw_one = max(raw_sync_one(), await raw_async_one())
    ours_one = await helix_one()
    raw_64 = max(raw_pipelined(64), await raw_async_pipelined(64))
    raw_16 = max(raw_pipelined(16), await raw_async_pipelined(16))
    ours_buffered = await helix_buffered()
    await manager.aclose()
    await client.aclose()
    n = f"{count:,}"
    rows = [
        Row(f"ingest {n} chunks, one at a time (vs XADD one at a time)", ours_one, raw_one, "/s", True, ">= 0.40"),
        Row(f"ingest {n} chunks, buffered (vs XADD pipelined by 64)", ours_buffered, raw_64, "/s", True, ">= 0.50"),
        Row(f"ingest {n} chunks, buffered (vs XADD pipelined by 16)", ours_buffered, raw_16, "/s", True, ""),
    ]
    return rows, "ingest-one"


# -- reads -----------------------------------------------------------------------------------


async def bench_reads(url: str, prefix: str, long_stream: str, long_count: int) -> list[Row]:
    manager = RedisStreamManager(url, key_prefix=prefix)
    writer = await manager.create_writer("read-10k", "run-7f3a9c2e51d0", buffered=True)
    await writer.write_many(make_chunk(i) for i in range(10_000))
    await writer.close()
    await manager.end_stream("read-10k")
    key = manager._keys("read-10k")[0]
    sync = redis.Redis.from_url(url)
    client = aredis.Redis.from_url(url)

    async def raw_async_all() -> None:
        entries = await client.xrange(key)
        assert len(entries) == 10_000

    def raw_sync_all() -> float:
        start = time.perf_counter()
        assert len(sync.xrange(key)) == 10_000
        return time.perf_counter() - start

    async def helix_all() -> None:
        assert len(await manager.get_all_chunks("read-10k")) == 10_000

    async def helix_reader() -> None:
        reader = await manager.create_resumable_reader("read-10k")
        assert reader is not None
        total = 0
        async for batch in reader.batches():
            total += len(batch)
        assert total == 10_000

    runs = 15
    raw = min(
        statistics.median([await timed(raw_async_all) for _ in range(runs)]),
        statistics.median([raw_sync_all() for _ in range(runs)]),
    )
    ours = statistics.median([await timed(helix_all) for _ in range(runs)])
    ours_reader = statistics.median([await timed(helix_reader) for _ in range(runs)])

    middle = long_count // 2
    long_key = manager._keys(long_stream)[0]

    async def helix_first() -> None:
        reader = await manager.create_resumable_reader(long_stream, middle)
        assert reader is not None
        _, sequence = await reader.__anext__()
        assert sequence == middle + 1
        await reader.aclose()

    async def raw_first() -> None:
        entries = await client.xrange(long_key, f"{middle + 1}-0", "+", count=1000)
        assert entries[0][0] == f"{middle + 1}-0".encode()

    resume_runs = 100
    ours_first = statistics.median([await timed(helix_first) for _ in range(resume_runs)])
    raw_first_time = statistics.median([await timed(raw_first) for _ in range(resume_runs)])
    await manager.aclose()
    await client.aclose()
    return [
        Row(
            "read a whole 10,000-chunk stream: get_all_chunks (vs XRANGE)", ours * 1e3, raw * 1e3, "ms", False, "<= 1.6"
        ),
        Row(
            "read a whole 10,000-chunk stream: resumable reader (vs XRANGE)",
            ours_reader * 1e3,
            raw * 1e3,
            "ms",
            False,
            "",
        ),
        Row(
            f"first chunk resuming at {middle:,} of {long_count:,} (vs XRANGE page)",
            ours_first * 1e3,
            raw_first_time * 1e3,
            "ms",
            False,
            "",
        ),
    ]


# -- latency across processes ------------------------------------------------------------------


def _raw_reader(url: str, key: str, count: int, ready: Any, out: Any) -> None:
    client = redis.Redis.from_url(url)
    last = "$"
    latencies: list[float] = []
    ready.set()
    while len(latencies) < count:
        reply = client.xread({key: last}, block=0, count=100)
        now = time.time_ns()
        for _, entries in reply:
            for entry_id, fields in entries:
                last = entry_id
                latencies.append((now - int(fields[b"t"])) / 1e6)
    out.put(latencies)


def _raw_writer(url: str, key: str, count: int, rate: float) -> None:
    client = redis.Redis.from_url(url)
    start = time.perf_counter()
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        client.xadd(key, {"t": str(time.time_ns()), "c": FILLER[:120]})


def _helix_reader(url: str, prefix: str, streams: list[str], count: int, ready: Any, out: Any) -> None:
    async def main() -> None:
        manager = RedisStreamManager(url, key_prefix=prefix)
        latencies: list[float] = []
        done = asyncio.Event()

        async def follow(stream_id: str) -> None:
            reader = await manager.create_resumable_reader(stream_id)
            assert reader is not None
            async for batch in reader.batches():
                now = time.time_ns()
                for chunk, _ in batch:
                    latencies.append((now - int(chunk.delta[:19])) / 1e6)  # type: ignore[union-attr]
                if len(latencies) >= count:
                    done.set()

        tasks = [asyncio.ensure_future(follow(s)) for s in streams]
        await asyncio.sleep(1.0 + len(streams) / 1000)  # every reader caught up and tailing
        ready.set()
        out.put(("client_name", manager.client_name))
        await asyncio.wait_for(done.wait(), 120)
        out.put(("latencies", latencies[:count]))
        for task in tasks:
            task.cancel()
        await manager.aclose()

    asyncio.run(main())


def _helix_writer(url: str, prefix: str, streams: list[str], count: int, rate: float) -> None:
    async def main() -> None:
        manager = RedisStreamManager(url, key_prefix=prefix)
        writers = [await manager.create_writer(s, "run-7f3a9c2e51d0") for s in streams]
        start = time.perf_counter()
        for i in range(count):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await writers[i % len(writers)].write(make_chunk(i, f"{time.time_ns()} {FILLER[:40]}"))
        await manager.aclose()

    asyncio.run(main())


def latency_raw(url: str, prefix: str, count: int, rate: float) -> list[float]:
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    key = f"{prefix}raw-latency"
    reader = ctx.Process(target=_raw_reader, args=(url, key, count, ready, out))
    reader.start()
    ready.wait(30)
    time.sleep(0.2)
    writer = ctx.Process(target=_raw_writer, args=(url, key, count, rate))
    writer.start()
    latencies: list[float] = out.get(timeout=120)
    writer.join()
    reader.join()
    return latencies


def latency_helix(url: str, prefix: str, readers: int, count: int, rate: float) -> tuple[list[float], int]:
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    streams = [f"latency-{readers}-{i}" for i in range(readers)]
    setup = RedisStreamManager(url, key_prefix=prefix)

    async def create() -> None:
        for stream_id in streams:
            await setup._ensure_stream(stream_id)
        await setup.aclose()

    asyncio.run(create())
    reader = ctx.Process(target=_helix_reader, args=(url, prefix, streams, count, ready, out))
    reader.start()
    ready.wait(60)
    _, client_name = out.get(timeout=30)
    writer = ctx.Process(target=_helix_writer, args=(url, prefix, streams, count, rate))
    writer.start()
    time.sleep(1.0)
    connections = [c for c in redis.Redis.from_url(url).client_list() if c.get("name") == client_name]
    _, latencies = out.get(timeout=180)
    writer.join()
    reader.join()
    return latencies, len(connections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks for the ingest runs")
    parser.add_argument("--events", type=int, default=3000, help="events per latency run (at --rate)")
    parser.add_argument("--rate", type=float, default=1000.0, help="events per second in latency runs")
    parser.add_argument("--quick", action="store_true", help="20,000 chunks and 1,000 events")
    args = parser.parse_args()
    if args.quick:
        args.chunks, args.events = 20_000, 1000
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    url = args.redis_url
    info = redis.Redis.from_url(url).info("server")
    print(f"Redis {info['redis_version']} at {url}; redis-py {redis.__version__}; prefix {prefix}\n")

    rows, long_stream = asyncio.run(bench_ingest(url, args.chunks, prefix))
    rows += asyncio.run(bench_reads(url, prefix, long_stream, args.chunks))

    raw = latency_raw(url, prefix, args.events, args.rate)
    raw_p50, raw_p99 = percentile(raw, 0.50), percentile(raw, 0.99)
    one, _ = latency_helix(url, prefix, 1, args.events, args.rate)
    many, connections = latency_helix(url, prefix, 1000, args.events, args.rate)
    rate = f"{args.rate:,.0f}/s"
    rows += [
        Row(
            f"write -> reader p50 at {rate}, 1 reader (vs XADD -> XREAD)",
            percentile(one, 0.5),
            raw_p50,
            "ms",
            False,
            "<= 3",
        ),
        Row(
            f"write -> reader p99 at {rate}, 1 reader (vs XADD -> XREAD)",
            percentile(one, 0.99),
            raw_p99,
            "ms",
            False,
            "<= 5",
        ),
        Row(
            f"write -> reader p50 at {rate}, 1,000 readers (vs XADD -> XREAD)",
            percentile(many, 0.5),
            raw_p50,
            "ms",
            False,
            "<= 3",
        ),
        Row(
            f"write -> reader p99 at {rate}, 1,000 readers (vs XADD -> XREAD)",
            percentile(many, 0.99),
            raw_p99,
            "ms",
            False,
            "<= 5",
        ),
        Row("Redis connections of 1,000 tailing readers in one process", connections, 0, "", False, "<= 4"),
    ]
    print_table(rows)
    cleanup = redis.Redis.from_url(url)
    for key in cleanup.scan_iter(match=f"{prefix}*", count=1000):
        cleanup.delete(key)


if __name__ == "__main__":
    main()
