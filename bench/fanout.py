"""Live fan-out load: N streams x R events a second, written to Redis and followed over SSE.

The same load for Helix and for the bare fan-out app of :mod:`bench.raw_asgi`, under the same
server: clients in other processes follow every stream (Helix's resume route with a token, or
``/fanout/<id>``), a writer process appends the events to the store as a worker would, each
carrying the time it was written (both apps follow the store's announcements of them: the same
writes, the same Redis work), and the clients report each event's write → client latency. The
server's own CPU time over the write window is read from ``/proc``, and so is the share of the
load's CPUs that was busy.

The load is made cheap, since on a small machine it shares CPUs with Redis: the writer packs its
commands ahead of time around each payload and parses replies with hiredis, and the clients read
in protocol callbacks, with no task or coroutine step per event.

:func:`measure` runs one load; :func:`sustainable` steps the number of streams up until one
process no longer delivers every event with p99 ≤ 20 ms (in two tries of that load), then
narrows the knee down by halving.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing as mp
import os
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from bench.costs import cpu_seconds, cpus_idle, pct, progress
from tooling.servers import HOST

__all__ = ["Load", "Target", "measure", "sustainable"]

TIMESTAMP = re.compile(rb'"delta":"(\d{19}) ')
#: Sustainable: every event delivered, and p99 write → client at most this.
P99_LIMIT_MS = 20.0
#: A load whose own CPUs were at least this busy says more about the machine than the server.
LOAD_BOUND = 0.95


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
    load_busy: float  # the share of the load's CPUs busy over that window (the writer, clients, Redis...)
    load_cpu_s: float  # the writer's and the clients' own CPU time

    @property
    def delivered(self) -> float:
        return self.received / self.written if self.written else 0.0

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_s / self.received * 1e6 if self.received else float("nan")

    @property
    def load_bound(self) -> bool:
        """Whether the load's own CPUs were (nearly) saturated: then the knee is the machine's,
        not the server's."""
        return self.load_busy >= LOAD_BOUND

    @property
    def sustained(self) -> bool:
        return self.received >= self.written and self.p99 <= P99_LIMIT_MS


def load_cpus() -> set[int] | None:
    """The CPUs the load runs on (``--split-cpus``), or ``None``: all of them, shared."""
    cpus = os.environ.get("HELIX_BENCH_LOAD_CPUS")
    return {int(c) for c in cpus.split(",")} if cpus else None


def as_load(niceness: int) -> None:
    """Make this process load, not server: niced, on the load's CPUs when told so, and with its
    cyclic collector off (a load process lives for one measure, and its collector's pauses would
    be counted as the server's latency)."""
    gc.disable()
    os.nice(niceness)
    cpus = load_cpus()
    if cpus:
        os.sched_setaffinity(0, cpus)


class _Follower(asyncio.Protocol):
    """One followed stream, read in the transport's callback: no task, reader or coroutine step
    per event, so that the load costs little CPU beside the server it measures."""

    def __init__(self, request: bytes, answered: list[int], arrivals: list[tuple[int, list[bytes]]]) -> None:
        self.request, self.answered, self.arrivals = request, answered, arrivals
        self.tail, self.first = b"", True
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.time_ns()
        if self.first:
            self.first = False
            self.answered.append(1)
        window = self.tail + data if self.tail else data  # only whole events are counted: one split across reads, once
        cut = window.rfind(b"\n\n")
        if cut < 0:
            self.tail = window
            return
        self.arrivals.append((now, TIMESTAMP.findall(window, 0, cut)))  # latencies worked out after the load
        self.tail = window[cut + 2 :]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


def _follow(target: Target, streams: list[str], niceness: int, ready: Any, stop: Any, out: Any) -> None:
    """Client process: follow ``streams``, say so on ``ready`` once every one has answered, and
    read until ``stop`` is set; put every event's latency (ms) and this process's CPU seconds
    from ``ready`` to ``stop``."""
    as_load(niceness)
    import uvloop

    auth = f"Authorization: Token {target.token}\r\n" if target.token else ""

    async def main() -> tuple[list[float], float]:
        loop = asyncio.get_running_loop()
        answered: list[int] = []
        arrivals: list[tuple[int, list[bytes]]] = []
        followers = []
        for stream in streams:
            request = f"GET {target.path(stream)} HTTP/1.1\r\nHost: {HOST}\r\n{auth}\r\n".encode()
            follower = _Follower(request, answered, arrivals)
            await loop.create_connection(lambda follower=follower: follower, HOST, target.port)  # type: ignore[misc]
            followers.append(follower)
        while len(answered) < len(streams) and not all(f.closed.done() for f in followers):
            await asyncio.sleep(0.05)
        ready.put(len(answered))
        cpu_start = time.process_time()
        while not stop.is_set():
            await asyncio.sleep(0.1)
        cpu = time.process_time() - cpu_start
        for follower in followers:
            if follower.transport is not None:
                follower.transport.close()
        await asyncio.gather(*(f.closed for f in followers))
        latencies = [(now - int(stamp)) / 1e6 for now, stamps in arrivals for stamp in stamps]
        return latencies, cpu

    out.put(uvloop.run(main()))


def _write(redis_url: str, streams: list[str], rate: float, seconds: float, niceness: int, out: Any) -> None:
    """Writer process: ``rate`` events a second to every stream for ``seconds``.

    Each event is one chunk appended to its stream as a worker appends it: the store's own append
    script, with the store's settings, an epoch, a batch token and the writer's clock. The script
    announces the chunk on the stream's channel, which Helix's readers and the bare fan-out app
    both follow: the two apps are fed by the same writes, so that the load, Redis included, is the
    same for both. The events due in the same millisecond go out together, as commands packed
    ahead of time around each event's own arguments, so that the writer costs little CPU beside
    the server it measures. An event's timestamp is taken before it is queued, so the batching
    counts against the measured latency. Puts the number of events written and this process's
    CPU seconds.
    """
    as_load(niceness)
    import hiredis
    import redis

    from streams.backends import RedisStreamManager
    from streams.backends.redis_scripts import append_script
    from streams.protocol import TextDelta, encode_chunk

    client = redis.Redis.from_url(redis_url)
    store = RedisStreamManager(redis_url)
    sha = client.script_load(append_script(store._ms(store.active_ttl), store.max_length))
    # Each command as RESP up to its per-event arguments (token, now, one chunk, the chunk), packed once.
    prefixes = [
        b"*%d\r\n" % (len(command) + 4) + hiredis.pack_command(command).split(b"\r\n", 1)[1]
        # The store's keys, epoch 1, no holder.
        for command in [("EVALSHA", sha, 3, *store._keys(stream), 1, "") for stream in streams]
    ]
    writer = uuid.uuid4().hex[:12].encode()

    def arguments(index: int, now_ns: int) -> bytes:
        token = b"%s:%d" % (writer, index)  # grows on every stream, as a writer's batches do
        return b"$%d\r\n%s\r\n$13\r\n%d\r\n$1\r\n1\r\n" % (len(token), token, now_ns // 1_000_000)

    # A chunk as the store keeps it, its text the time it was written: the bytes around the time.
    marker = "1" * 19
    head, tail = encode_chunk(TextDelta(agent_id="run-bench", timestamp=1, delta=f"{marker} word"))[1].split(
        marker.encode()
    )
    length = b"$%d\r\n" % (len(head) + 19 + len(tail))
    # A socket of its own, its replies parsed by hiredis in C: redis-py's read of one reply costs
    # more than the command it answers.
    connection = client.connection_pool.get_connection("PING")
    sock, replies = connection._sock, hiredis.Reader()

    def read_replies(expected: int) -> None:
        while expected:
            reply = replies.gets()
            if reply is False:
                replies.feed(sock.recv(1 << 16))
                continue
            if isinstance(reply, hiredis.ReplyError):
                raise RuntimeError(f"Redis refused a write: {reply}")
            expected -= 1

    cpu_start = time.process_time()
    total = rate * len(streams)
    start = time.perf_counter()
    count = 0
    while time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * total) + 1
        if due <= count:
            time.sleep(max(0.0, min(0.001, (count + 1) / total - (time.perf_counter() - start))))
            continue
        sock.sendall(
            b"".join(
                [
                    b"%s%s%s%s%d%s\r\n"
                    % (prefixes[index % len(streams)], arguments(index, now), length, head, now, tail)
                    for index in range(count, due)
                    for now in (time.time_ns(),)
                ]
            )
        )
        read_replies(due - count)
        count = due
    out.put((count, time.process_time() - cpu_start))


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
    cpu_before, idle_before = cpu_seconds(target.pid), cpus_idle(load_cpus())
    writer = ctx.Process(target=_write, args=(redis_url, streams, rate, seconds, niceness, out))
    writer.start()
    writer.join()
    if writer.exitcode != 0:
        stop.set()
        raise RuntimeError(f"the writer process failed (exit code {writer.exitcode})")
    time.sleep(0.5)  # the last events delivered
    cpu, idle_after = cpu_seconds(target.pid) - cpu_before, cpus_idle(load_cpus())
    elapsed, idle = idle_after[0] - idle_before[0], idle_after[1] - idle_before[1]
    time.sleep(1.0)  # and read by clients that share their CPU with the writer and Redis
    stop.set()
    results = [out.get(timeout=120) for _ in range(processes + 1)]
    for client in clients:
        client.join()
    written = next(r[0] for r in results if isinstance(r[0], int))
    latencies = [value for r in results if isinstance(r[0], list) for value in r[0]]
    load_cpu = sum(r[1] for r in results)
    busy = 1 - idle / elapsed if elapsed else float("nan")
    return Load(len(streams), written, len(latencies), pct(latencies, 0.5), pct(latencies, 0.99), cpu, busy, load_cpu)


def sustainable(
    target: Target, make_streams: Any, redis_url: str, steps: list[int], resolution: float = 0.05, **load: Any
) -> tuple[int, list[Load]]:
    """The largest number of streams that ``target`` sustains (:attr:`Load.sustained`): step up
    through ``steps`` until a load is not sustained, then halve the gap between the last load
    sustained and the first one not, until it is within ``resolution`` of the former (steps
    such as 1,500 then 2,000 alone would put the knee anywhere in a third of the range). That
    number and every load measured.

    A load that is not sustained is measured once more, and fails only if it fails again. One
    stall of the machine (another process, a slow second of a virtual CPU) puts a few-second
    load's p99 past the bound, and a knee found there says nothing of the server: one such stall
    once put the bare app's knee at 575 streams, where other runs had it at 950 to 1,000. A
    server past its knee falls behind for the whole load, and fails both times."""
    best, failed, loads = 0, 0, []

    def run(count: int) -> bool:
        for attempt in ("", " (again)"):
            result = measure(target, make_streams(count), redis_url, **load)
            loads.append(result)
            progress(
                f"{target.kind}: {count} streams{attempt}: {result.received:,}/{result.written:,} delivered, "
                f"p99 {result.p99:.1f} ms, {result.cpu_us_per_event:.0f} us/event; "
                f"load CPUs {result.load_busy:.0%} busy (writer and clients {result.load_cpu_s:.1f} s)"
            )
            if result.sustained:
                return True
        return False

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
