"""Live fan-out load: N streams x R events a second, written to Redis and followed over SSE.

The same load for Helix and for the bare fan-out app of :mod:`bench.raw_asgi`, under the same
server: clients in other processes follow every stream (Helix's resume route with a token, or
``/fanout/<id>``), a writer process writes the events (Helix's through the store's own append
script, as a worker would; the bare app's as a ``PUBLISH``), each carrying the time it was
written, and the clients report each event's write → client latency. The server's own CPU time
over the write window is read from ``/proc``.

:func:`measure` runs one load; :func:`sustainable` steps the number of streams up until one
process no longer delivers every event with p99 ≤ 20 ms, then narrows the knee down by halving.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from bench.servers import HOST, cpu_seconds, pct, progress

__all__ = ["Load", "Target", "measure", "sustainable"]

TIMESTAMP = re.compile(rb'"delta":"(\d{19}) ')
#: Sustainable: every event delivered, and p99 write → client at most this.
P99_LIMIT_MS = 20.0


@dataclass(frozen=True)
class Target:
    """What the load follows: ``kind`` ``helix`` or ``fanout``, on ``port``, served by ``pid``."""

    kind: str
    port: int
    pid: int
    token: str = ""

    def path(self, stream: str) -> str:
        return f"/api/chat/{stream}" if self.kind == "helix" else f"/fanout/{stream}"


@dataclass(frozen=True)
class Load:
    streams: int
    written: int
    received: int
    p50: float
    p99: float
    cpu_s: float  # the server's CPU time over the write window

    @property
    def delivered(self) -> float:
        return self.received / self.written if self.written else 0.0

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_s / self.received * 1e6 if self.received else float("nan")

    @property
    def sustained(self) -> bool:
        return self.received >= self.written and self.p99 <= P99_LIMIT_MS


def as_load(niceness: int) -> None:
    """Make this process load, not server: niced, and on the load's CPUs when told so."""
    os.nice(niceness)
    cpus = os.environ.get("HELIX_BENCH_LOAD_CPUS")
    if cpus:
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def _follow(target: Target, streams: list[str], niceness: int, ready: Any, stop: Any, out: Any) -> None:
    """Client process: follow ``streams``, say so on ``ready`` once every one has answered, and
    read until ``stop`` is set; put every event's latency (ms)."""
    as_load(niceness)
    import uvloop

    writers: list[asyncio.StreamWriter] = []

    async def follow(stream: str, latencies: list[float], answered: list[int]) -> None:
        reader, writer = await asyncio.open_connection(HOST, target.port, limit=1 << 20)
        writers.append(writer)
        auth = f"Authorization: Token {target.token}\r\n" if target.token else ""
        writer.write(f"GET {target.path(stream)} HTTP/1.1\r\nHost: {HOST}\r\n{auth}\r\n".encode())
        tail, first = b"", True
        while True:  # until main() closes the connection: no timer, task or stop check per read
            try:
                data = await reader.read(1 << 16)
            except ConnectionError:
                break
            if not data:
                break
            if first:
                first = False
                answered.append(1)
            now = time.time_ns()
            window = tail + data  # only whole events are counted: one split across reads, once
            cut = window.rfind(b"\n\n")
            if cut < 0:
                tail = window
                continue
            latencies.extend((now - int(m)) / 1e6 for m in TIMESTAMP.findall(window, 0, cut))
            tail = window[cut + 2 :]

    async def main() -> list[float]:
        latencies: list[float] = []
        answered: list[int] = []
        tasks = [asyncio.ensure_future(follow(s, latencies, answered)) for s in streams]
        while len(answered) < len(streams) and not all(t.done() for t in tasks):
            await asyncio.sleep(0.05)
        ready.put(len(answered))
        while not stop.is_set():
            await asyncio.sleep(0.1)
        for writer in writers:
            writer.close()  # each follow() reads the end of its stream and returns
        await asyncio.gather(*tasks)
        return latencies

    out.put(uvloop.run(main()))


def _write(kind: str, redis_url: str, streams: list[str], rate: float, seconds: float, niceness: int, out: Any) -> None:
    """Writer process: ``rate`` events a second to every stream for ``seconds``.

    The events due in the same millisecond go out in one pipeline, which keeps this process's
    cost per event low; each is still one append (one script call and notification) or one
    ``PUBLISH`` on its own stream. Its timestamp is taken before it is queued, so the batching
    counts against the measured latency.
    """
    as_load(niceness)
    import redis

    from streams.backends import RedisStreamManager
    from streams.backends.redis_scripts import append_script
    from streams.protocol import TextDelta, encode_chunk

    client = redis.Redis.from_url(redis_url)
    if kind == "helix":
        manager = RedisStreamManager(redis_url)
        script = client.register_script(append_script(0, None))
        keys = [manager._keys(s) for s in streams]  # the store's key layout

        def queue(pipe: Any, index: int, payload: bytes) -> None:
            script(keys=keys[index], args=["", "", 1, payload], client=pipe)
    else:
        channels = [f"fanout:{s}".encode() for s in streams]

        def queue(pipe: Any, index: int, payload: bytes) -> None:
            pipe.publish(channels[index], payload)

    total = rate * len(streams)
    start = time.perf_counter()
    count = 0
    while time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * total) + 1
        if due <= count:
            time.sleep(max(0.0, min(0.001, (count + 1) / total - (time.perf_counter() - start))))
            continue
        pipe = client.pipeline(transaction=False)
        for index in range(count, due):
            stream = index % len(streams)
            chunk = TextDelta(agent_id="run-bench", timestamp=1, delta=f"{time.time_ns()} word")
            queue(pipe, stream, encode_chunk(chunk)[1])
        pipe.execute()
        count = due
    out.put(count)


def measure(
    target: Target,
    streams: list[str],
    redis_url: str,
    *,
    rate: float,
    seconds: float,
    processes: int,
    niceness: int,
) -> Load:
    """One load: every stream followed, ``rate`` events a second written to each for ``seconds``."""
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    clients = [
        ctx.Process(target=_follow, args=(target, streams[i::processes], niceness, ready, stop, out))
        for i in range(processes)
    ]
    for client in clients:
        client.start()
    answered = sum(ready.get(timeout=300) for _ in clients)
    if answered < len(streams):
        raise RuntimeError(f"only {answered} of {len(streams)} streams answered")
    time.sleep(0.5)
    cpu_before = cpu_seconds(target.pid)
    writer = ctx.Process(target=_write, args=(target.kind, redis_url, streams, rate, seconds, niceness, out))
    writer.start()
    writer.join()
    if writer.exitcode != 0:
        stop.set()
        raise RuntimeError(f"the writer process failed (exit code {writer.exitcode})")
    time.sleep(0.5)  # the last events delivered
    cpu = cpu_seconds(target.pid) - cpu_before
    time.sleep(1.0)  # and read by clients that share their CPU with the writer and Redis
    stop.set()
    results = [out.get(timeout=120) for _ in range(processes + 1)]
    for client in clients:
        client.join()
    written = next(r for r in results if isinstance(r, int))
    latencies = [value for r in results if isinstance(r, list) for value in r]
    return Load(len(streams), written, len(latencies), pct(latencies, 0.5), pct(latencies, 0.99), cpu)


def sustainable(
    target: Target, make_streams: Any, redis_url: str, steps: list[int], resolution: float = 0.05, **load: Any
) -> tuple[int, list[Load]]:
    """The largest number of streams that ``target`` sustains (:attr:`Load.sustained`): step up
    through ``steps`` until a load is not sustained, then halve the gap between the last load
    sustained and the first one not, until it is within ``resolution`` of the former (steps
    such as 1,500 then 2,000 alone would put the knee anywhere in a third of the range). That
    number and every load measured."""
    best, failed, loads = 0, 0, []

    def run(count: int) -> bool:
        result = measure(target, make_streams(count), redis_url, **load)
        loads.append(result)
        progress(
            f"{target.kind}: {count} streams: {result.received:,}/{result.written:,} delivered, "
            f"p99 {result.p99:.1f} ms, {result.cpu_us_per_event:.0f} us/event"
        )
        return result.sustained

    for count in steps:
        if not run(count):
            failed = count
            break
        best = count
    while failed and best and failed - best > max(10, best * resolution):
        middle = (best + failed) // 2
        if run(middle):
            best = middle
        else:
            failed = middle
    return best, loads
