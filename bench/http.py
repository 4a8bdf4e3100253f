"""Benchmark of the HTTP surface: Daphne + the async stream views + Redis, as browsers use them.

    python -m bench.http --redis-url redis://127.0.0.1:6379/15 [--idle 5000] [--active 100 300]
        [--phases idle active rate post] [--client-processes 2] [--load-niceness 10] [--split-cpus]

Starts its own Daphne (listen backlog 8192), a bare ASGI baseline app under Daphne, and a Celery
worker, on a temporary SQLite database. Measures: idle tailing streams per Daphne process (time
for all to connect, memory per stream, Redis connections), write → client latency with many
active streams, one connection's event rate against the bare ASGI app, resume times, and POST →
first byte on the Celery executor. The active streams' clients and writer run in their own
processes at a raised niceness, so that on a small machine they leave the cores to the server;
``--split-cpus`` goes further and pins Daphne (and a local Redis) to the first CPU and all the
load to the others, as if the clients were other machines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.http_client import TIMESTAMP, SSEConnection
from bench.runtime import setup_django

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
# The load (SSE clients, the writer) runs at this niceness so that on a small machine it yields the
# cores to Daphne and Redis, as it would from other machines; --load-niceness 0 shares them evenly.
LOAD_NICENESS = 10
Row = tuple[str, str, str]  # measure, value, target


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        args, cwd=ROOT, env={**os.environ, **env}, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    return process


def wait_port(port: int, timeout: float = 30) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- fixtures in the database and Redis ------------------------------------------------------------


def make_sessions(user_id: int, count: int) -> list[str]:
    from chat.models import ChatSession, Run

    sessions = ChatSession.objects.bulk_create([ChatSession(agent="chat", owner_id=user_id) for _ in range(count)])
    Run.objects.bulk_create([Run(session=s, agent="chat", status="running", message_id=f"m-{s.pk}") for s in sessions])
    return [str(s.pk) for s in sessions]


async def open_streams(redis_url: str, session_ids: list[str], chunks: int = 0) -> None:
    from streams.backends import RedisStreamManager
    from streams.protocol import TextDelta

    manager = RedisStreamManager(redis_url)
    for session_id in session_ids:
        writer = await manager.create_writer(session_id, f"run-{session_id[:8]}", "chat", buffered=True)
        if chunks:
            await writer.write_many(
                TextDelta(agent_id=f"run-{session_id[:8]}", timestamp=1, delta=f"w{i} ") for i in range(chunks)
            )
        await writer.close()
    await manager.aclose()


# -- measurements ---------------------------------------------------------------------------------


async def bench_idle(port: int, token: str, sessions: list[str], daphne_pid: int, redis_url: str) -> dict[str, float]:
    import redis

    before = rss_kb(daphne_pid)
    headers = {"Authorization": f"Token {token}"}
    connections = [SSEConnection(HOST, port) for _ in sessions]
    start = time.perf_counter()

    async def connect(connection: SSEConnection, session_id: str) -> float:
        status = await connection.open("GET", f"/api/chat/{session_id}", headers)
        assert status == 200, status
        await connection.read_until(b"stream-open")
        return time.perf_counter() - start

    times = await asyncio.gather(*(connect(c, s) for c, s in zip(connections, sessions, strict=True)))
    await asyncio.sleep(2)
    after = rss_kb(daphne_pid)
    client = redis.Redis.from_url(redis_url)
    redis_connections = sum(1 for c in client.client_list() if c.get("name") == f"helix-streams-{daphne_pid}")
    for connection in connections:
        connection.close()
    await asyncio.sleep(5)  # let the server release thousands of readers before the next phase
    return {
        "all_connected_s": max(times),
        "kb_per_stream": (after - before) / len(sessions),
        "redis_connections": redis_connections,
    }


def _as_load(niceness: int) -> None:
    """Make this process load, not server: niced, and on the load's CPUs when --split-cpus says so."""
    os.nice(niceness)
    cpus = os.environ.get("HELIX_BENCH_LOAD_CPUS")
    if cpus:
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def _latency_client(port: int, token: str, sessions: list[str], seconds: float, niceness: int, out: Any) -> None:
    _as_load(niceness)

    async def main() -> list[float]:
        latencies: list[float] = []
        stop_at = time.monotonic() + seconds

        async def follow(session_id: str) -> None:
            connection = SSEConnection(HOST, port)
            await connection.open("GET", f"/api/chat/{session_id}", {"Authorization": f"Token {token}"})
            while time.monotonic() < stop_at:
                try:
                    data = await asyncio.wait_for(connection.read(), max(0.1, stop_at - time.monotonic()))
                except TimeoutError:
                    break
                now = time.time_ns()
                latencies.extend((now - int(m)) / 1e6 for m in TIMESTAMP.findall(data))
            connection.close()

        await asyncio.gather(*(follow(s) for s in sessions))
        return latencies

    out.put(asyncio.run(main()))


def _write_at_rate(redis_url: str, sessions: list[str], rate: float, seconds: float) -> int:
    """Write ``rate`` events a second to every stream, through the store's own append script.

    A load generator, not a worker: the events due in the same millisecond go out in one
    pipeline, which keeps this process's cost per event low enough for one core to produce
    thousands a second. Each event is still one append (one script call, one notification) on
    its own stream, as a worker's would be; its timestamp is taken before it is queued, so the
    batching counts against the measured latency.
    """
    import redis

    from streams.backends import RedisStreamManager
    from streams.backends.redis_scripts import append_script
    from streams.protocol import TextDelta, encode_chunk

    manager = RedisStreamManager(redis_url)
    client = redis.Redis.from_url(redis_url)
    script = client.register_script(append_script(0, None))
    keys = [manager._keys(s) for s in sessions]  # the store's key layout
    total = rate * len(sessions)
    start = time.perf_counter()
    count = 0
    while time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * total) + 1
        if due <= count:
            time.sleep(min(0.001, (count + 1) / total - (time.perf_counter() - start)))
            continue
        pipe = client.pipeline(transaction=False)
        for index in range(count, due):
            session_id = sessions[index % len(sessions)]
            chunk = TextDelta(agent_id=f"run-{session_id[:8]}", timestamp=1, delta=f"{time.time_ns()} word")
            script(keys=keys[index % len(keys)], args=["", "", 1, encode_chunk(chunk)[1]], client=pipe)
        pipe.execute()
        count = due
    return count


def _writer(redis_url: str, sessions: list[str], rate: float, seconds: float, niceness: int, out: Any) -> None:
    _as_load(niceness)
    out.put(_write_at_rate(redis_url, sessions, rate, seconds))


def bench_active(
    port: int,
    token: str,
    sessions: list[str],
    redis_url: str,
    rate: float,
    seconds: float,
    processes: int,
    niceness: int,
) -> dict[str, float]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    clients = [
        ctx.Process(target=_latency_client, args=(port, token, sessions[i::processes], seconds + 3, niceness, out))
        for i in range(processes)
    ]
    for client in clients:
        client.start()
    time.sleep(2.5)  # every client attached
    writer = ctx.Process(target=_writer, args=(redis_url, sessions, rate, seconds, niceness, out))
    writer.start()
    results = [out.get(timeout=120) for _ in range(processes + 1)]
    written = next(r for r in results if isinstance(r, int))
    latencies = [value for r in results if isinstance(r, list) for value in r]
    for process in (*clients, writer):
        process.join()
    return {"events": written, "received": len(latencies), "p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99)}


async def bench_rate(port: int, raw_port: int, token: str, session_id: str, chunks: int) -> dict[str, float]:
    headers = {"Authorization": f"Token {token}"}

    async def count_events(connection: SSEConnection, expected: int, done_marker: bytes | None) -> float:
        start = time.perf_counter()
        seen, tail = 0, b""
        while seen < expected:
            try:
                data = await asyncio.wait_for(connection.read(), 10)
            except TimeoutError:
                progress(f"stalled after {seen} of {expected} events; last bytes {tail!r}")
                break
            if not data:
                break
            window = tail + data
            seen += window.count(b"text-delta")
            tail = window[-9:]  # shorter than the marker: nothing in it is counted twice
        return time.perf_counter() - start

    ours, raw = [], []
    for _ in range(5):
        connection = SSEConnection(HOST, port)
        t0 = time.perf_counter()
        await connection.open("GET", f"/api/chat/{session_id}", headers)
        elapsed = await count_events(connection, chunks, None) + (connection.first_byte_at - t0)
        ours.append(elapsed)
        connection.close()
        base = SSEConnection(HOST, raw_port)
        t0 = time.perf_counter()
        await base.open("GET", f"/events?n={chunks}", {})
        raw.append(await count_events(base, chunks, None) + (base.first_byte_at - t0))
        base.close()
    first = []
    for _ in range(20):
        connection = SSEConnection(HOST, port)
        t0 = time.perf_counter()
        await connection.open("GET", f"/api/chat/{session_id}", {**headers, "Last-Event-ID": str(chunks // 2)})
        await asyncio.wait_for(connection.read_until(b"data: {"), 10)
        first.append(time.perf_counter() - t0)
        connection.close()
    return {
        "ours_s": statistics.median(ours),
        "raw_s": statistics.median(raw),
        "first_event_s": statistics.median(first),
    }


async def bench_post(port: int, token: str, runs: int) -> dict[str, float]:
    first_byte, first_event = [], []
    for index in range(runs):
        session_id = str(uuid.uuid4())
        body = json.dumps({"message": f"Question {index}"}).encode()
        connection = SSEConnection(HOST, port)
        t0 = time.perf_counter()
        status = await connection.open(
            "POST",
            f"/api/chat/{session_id}",
            {"Authorization": f"Token {token}", "Content-Type": "application/json"},
            body,
        )
        assert status == 200, status
        await connection.read_until(b"stream-open")
        first_byte.append(connection.first_byte_at - t0)
        await connection.read_until(b'"type":"start"')
        first_event.append(time.perf_counter() - t0)
        await connection.read_until(b"[DONE]")
        connection.close()
    return {"first_byte_p50": pct(first_byte, 0.5), "first_event_p50": pct(first_event, 0.5)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--idle", type=int, default=5000)
    parser.add_argument("--active", type=int, nargs="+", default=[100, 300])
    parser.add_argument("--rate", type=float, default=20.0, help="events per second per active stream")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--client-processes", type=int, default=2, help="processes the active streams' clients share")
    parser.add_argument("--load-niceness", type=int, default=LOAD_NICENESS, help="niceness of the clients and writer")
    parser.add_argument(
        "--split-cpus",
        action="store_true",
        help="pin Daphne and a local Redis to the first CPU and the load to the others, as if on other machines",
    )
    parser.add_argument(
        "--phases", nargs="+", default=["idle", "active", "rate", "post"], choices=["idle", "active", "rate", "post"]
    )
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    workdir = Path(tempfile.mkdtemp(prefix="helix-bench-http-"))
    database = workdir / "bench.sqlite3"
    setup_django(database, args.redis_url)
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    user = User.objects.create_user("bench", password="bench-pw")
    token = Token.objects.create(user=user).key
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    env = {
        "DATABASE_URL": f"sqlite:///{database}",
        "REDIS_URL": args.redis_url,
        "HELIX_STREAM_BACKEND": "redis",
        "HELIX_EXECUTOR": "celery",
        "HELIX_CELERY_QUEUE": queue,
        "HELIX_SCRIPTED_DELAY_MS": "20",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
    }
    port, raw_port = free_port(), free_port()
    daphne = start(
        [
            sys.executable,
            "-m",
            "daphne",
            "--endpoint",
            f"tcp:port={port}:interface={HOST}:backlog=8192",
            "helix_site.asgi:application",
        ],
        {**env, "HELIX_RATE_LIMIT": "0"},
        workdir / "daphne.log",
    )
    raw = start(
        [sys.executable, "-m", "daphne", "-b", HOST, "-p", str(raw_port), "bench.raw_asgi:application"],
        {},
        workdir / "raw.log",
    )
    worker = start(
        [sys.executable, "-m", "celery", "-A", "helix_site", "worker", "--loglevel=WARNING", "-n", f"{queue}@%h"],
        env,
        workdir / "worker.log",
    )
    if args.split_cpus:
        import redis

        cpus = sorted(os.sched_getaffinity(0))
        os.environ["HELIX_BENCH_LOAD_CPUS"] = ",".join(str(c) for c in cpus[1:])
        os.sched_setaffinity(daphne.pid, {cpus[0]})
        os.sched_setaffinity(0, set(cpus[1:]))  # this process's own clients are load too
        with contextlib.suppress(Exception):  # a Redis of this machine: give it the server's CPU too
            os.sched_setaffinity(int(redis.Redis.from_url(args.redis_url).info("server")["process_id"]), {cpus[0]})
    rows: list[Row] = []
    try:
        wait_port(port)
        wait_port(raw_port)
        time.sleep(3)
        progress("servers up")
        if "idle" in args.phases:
            rows += idle_phase(args, user.pk, token, port, daphne.pid)
        if "active" in args.phases:
            rows += active_phase(args, user.pk, token, port)
        if "rate" in args.phases:
            rows += rate_phase(args, user.pk, token, port, raw_port)
        if "post" in args.phases:
            rows += post_phase(token, port)
    finally:
        stop(daphne, raw, worker)
    print("| measure | value | target |\n|---|---|---|")
    for row in rows:
        print(f"| {row[0]} | {row[1]} | {row[2]} |")


def stop(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()


def sessions_with_streams(redis_url: str, user_id: int, count: int, chunks: int = 0) -> list[str]:
    sessions = make_sessions(user_id, count)
    asyncio.run(open_streams(redis_url, sessions, chunks))
    return sessions


def idle_phase(args: argparse.Namespace, user_id: int, token: str, port: int, daphne_pid: int) -> list[Row]:
    idle_sessions = sessions_with_streams(args.redis_url, user_id, args.idle)
    progress("connecting idle streams")
    idle = asyncio.run(bench_idle(port, token, idle_sessions, daphne_pid, args.redis_url))
    return [
        (
            f"{args.idle:,} idle tailing streams: all connected and served",
            f"{idle['all_connected_s']:.1f} s",
            "<= 15 s",
        ),
        ("memory per idle stream (Daphne RSS growth / streams)", f"{idle['kb_per_stream']:.0f} KB", "<= 80 KB"),
        ("Redis connections of that Daphne process", f"{idle['redis_connections']:.0f}", "<= 4"),
    ]


def active_phase(args: argparse.Namespace, user_id: int, token: str, port: int) -> list[Row]:
    rows: list[Row] = []
    for count in args.active:
        sessions = sessions_with_streams(args.redis_url, user_id, count)
        progress(f"active streams: {count}")
        active = bench_active(
            port, token, sessions, args.redis_url, args.rate, args.seconds, args.client_processes, args.load_niceness
        )
        target = "p50 <= 2 ms, p99 <= 5 ms" if count <= 100 else "p99 <= 20 ms"
        rows.append(
            (
                f"{count} active streams x {args.rate:.0f} events/s (written: {active['events'] / args.seconds / count:.1f}/s each): write -> client p50 / p99 ({active['received']:,} of {active['events']:,} events)",
                f"{active['p50']:.2f} / {active['p99']:.2f} ms",
                target,
            )
        )
    return rows


def rate_phase(args: argparse.Namespace, user_id: int, token: str, port: int, raw_port: int) -> list[Row]:
    [replay_session] = sessions_with_streams(args.redis_url, user_id, 1, args.chunks)
    progress("one connection's rate, resume")
    rate = asyncio.run(bench_rate(port, raw_port, token, replay_session, args.chunks))
    return [
        (
            f"one connection, {args.chunks:,} events: Helix replay vs bare ASGI app under Daphne",
            f"{args.chunks / rate['ours_s']:,.0f}/s vs {args.chunks / rate['raw_s']:,.0f}/s ({rate['raw_s'] / rate['ours_s']:.2f})",
            ">= 0.50",
        ),
        (f"full replay of a {args.chunks:,}-chunk run", f"{rate['ours_s'] * 1e3:.0f} ms", "<= 50 ms"),
        ("resume from the middle: first event", f"{rate['first_event_s'] * 1e3:.1f} ms", "<= 8 ms"),
    ]


def post_phase(token: str, port: int) -> list[Row]:
    progress("POST to first byte")
    post = asyncio.run(bench_post(port, token, 20))
    return [
        (
            "POST -> first SSE byte / first event, p50 (Celery, scripted chat)",
            f"{post['first_byte_p50'] * 1e3:.1f} / {post['first_event_p50'] * 1e3:.1f} ms",
            "<= 50 ms",
        )
    ]


if __name__ == "__main__":
    main()
