"""Benchmark of the HTTP surface: one web process serving streams as browsers use them, every
figure beside a bare app doing the same job under the same server in the same run.

    python -m bench.http --redis-url redis://127.0.0.1:6379/15 [--server daphne|uvicorn]
        [--database-url postgres://…] [--split-cpus] [--phases storm fanout rate post] [--steps 100 200 ...]

Starts Helix (the demo site's ASGI application) and the bare apps of :mod:`bench.raw_asgi`
under the chosen server, and a Celery worker, on a temporary SQLite database (or a fresh
database on the PostgreSQL server of ``--database-url``). ``bin/bench-http`` runs it on a
throwaway Redis (``--postgres``: and PostgreSQL). Rows:

* **reconnect storm**: N idle streams connecting at once, each its own user's with its own
  token (auth, ownership, one run read, a subscription each), against the bare app accepting
  and answering N connections, and against the site's floor (:mod:`bench.site_floor`, the demo
  site answering an async view of its own behind its middleware): the time until the last is served, and the server's CPU per
  connection (``/proc``), each the median of three storms of each app taking turns. The times
  include the client opening its N connections, during which a server is mostly idle; the bare
  app's answers hide under that, so the CPU row is the closer measure of what a resume costs.
  With ``--split-cpus``, how busy the server's CPU and the load's were during each storm says
  which of them its time was bound by (with one CPU for the load; with more, the client's one
  thread is a share of them);
* **live fan-out** (:mod:`bench.fanout`): the server's CPU time per delivered event at a fixed
  load (the median of three loads of each app, the two apps taking turns), the largest load it
  sustains (every event delivered, p99 ≤ 20 ms) found by stepping (a load that fails is
  measured once more, and fails only if it fails again), and 300 streams x 20
  events/s, against the bare fan-out app (one pub/sub connection, each event framed once and
  written to every connection of its stream);
* **replay and resume**: a full replay of a 10,000-chunk run against XRANGE + parse of the same
  entries (medians of 21 spread over a second or two, after two unmeasured replays of each app:
  Python specialises code that has run a few times, and a process serving streams has; three
  raw reads follow each replay, so the two are timed on the machine as it is at the same
  moments); the first event of a resume against one XRANGE page plus one round trip of the bare
  app (both timed after each resume; with ``--split-cpus`` the raw reads run on the servers'
  CPU, where Helix decodes the entries),
  from the middle of the live stream and near its head (where each resume subscribes to
  the stream's tail; the row counts the Redis connections its resumes opened), each resume then
  read on to the stream's last chunk, as a client does;
* POST → first byte (Celery), and the older absolute rows, as information.

The load runs in other processes at a raised niceness; ``--split-cpus`` pins the server to the
first CPU and the load (clients, writer, a local Redis and PostgreSQL) to the others, as if on
other machines. The live load is written and read as cheaply as Python allows, and each of its
steps reports how busy the load's CPUs were: a knee found with them saturated is the machine's,
and the row says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench import fanout
from bench.costs import cpu_seconds, cpus_idle, progress, rss_kb
from bench.http_client import SSEConnection
from tooling.servers import HOST, SERVERS, serve, start, stop, wait_port
from tooling.site import setup_django

# The load runs at this niceness so that on a small machine it yields the cores to the server.
LOAD_NICENESS = 10
STEPS = [100, 200, 300, 400, 500, 600, 800, 1000, 1200, 1500, 2000, 2500, 3000]


@dataclass
class Row:
    measure: str
    helix: str
    baseline: str = ""
    ratio: float | None = None
    target: str = ""

    def cells(self) -> list[str]:
        return [self.measure, self.helix, self.baseline, "" if self.ratio is None else f"{self.ratio:.2f}", self.target]


# -- fixtures in the database and Redis ------------------------------------------------------------


#: Every session this run made: their streams are removed from Redis when it ends.
MADE: list[str] = []


def make_sessions(user_id: int | list[int], count: int, runs: int = 1) -> list[str]:
    """``count`` sessions with a running run each, of ``user_id`` (or of each of a list's users);
    with ``runs`` more than one, each a chat of that many runs, the earlier ones completed."""
    from chat.models import ChatSession, Run

    owners = user_id if isinstance(user_id, list) else [user_id] * count
    sessions = ChatSession.objects.bulk_create([ChatSession(agent="chat", owner_id=owner) for owner in owners])
    Run.objects.bulk_create(
        [
            Run(session=s, agent="chat", status="completed", message_id=f"m-{s.pk}-{n}")
            for n in range(runs - 1)
            for s in sessions
        ],
        batch_size=5000,
    )
    Run.objects.bulk_create([Run(session=s, agent="chat", status="running", message_id=f"m-{s.pk}") for s in sessions])
    MADE.extend(str(s.pk) for s in sessions)
    return [str(s.pk) for s in sessions]


def forget_streams(redis_url: str, queue: str = "") -> None:
    """Remove the streams of the sessions this run made, and its Celery queue's bindings, from
    Redis (a run leaves thousands of streams, which would otherwise pile up from run to run)."""
    import redis

    from streams.backends import RedisStreamManager

    keys = RedisStreamManager(redis_url)._keys  # the store's key layout
    client = redis.Redis.from_url(redis_url)
    for at in range(0, len(MADE), 1000):
        client.unlink(*(key for session in MADE[at : at + 1000] for key in keys(session)))
    bindings = list(client.scan_iter(match=f"_kombu.binding*.{queue}", count=1000)) if queue else []
    if bindings:
        client.unlink(*bindings)
    MADE.clear()


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


def storm_users(count: int) -> list[tuple[int, str]]:
    """``count`` users of their own, each with a token: ``(id, token)``."""
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    tag = uuid.uuid4().hex[:6]
    users = User.objects.bulk_create([User(username=f"storm-{tag}-{n}") for n in range(count)])
    tokens = Token.objects.bulk_create([Token(key=Token.generate_key(), user=user) for user in users])
    return [(token.user.pk, token.key) for token in tokens]


def bare_streams(redis_url: str, count: int) -> list[str]:
    """``count`` streams of the store with no session: the bare fan-out app's, written to as
    Helix's are."""
    streams = [uuid.uuid4().hex for _ in range(count)]
    MADE.extend(streams)
    asyncio.run(open_streams(redis_url, streams))
    return streams


def sessions_with_streams(
    redis_url: str, user_id: int | list[int], count: int, chunks: int = 0, runs: int = 1
) -> list[str]:
    sessions = make_sessions(user_id, count, runs)
    asyncio.run(open_streams(redis_url, sessions, chunks))
    return sessions


# -- the reconnect storm ---------------------------------------------------------------------------


def _busy_share(before: tuple[float, float], cpus: set[int] | None) -> float:
    """The share of ``cpus`` busy since ``before`` (a reading of :func:`cpus_idle`)."""
    elapsed, idle = (now - then for now, then in zip(cpus_idle(cpus), before, strict=True))
    return 1 - idle / elapsed if elapsed else float("nan")


async def connect_all(
    port: int, requests: list[tuple[str, dict[str, str]]], marker: bytes, cpus: dict[str, set[int] | None]
) -> tuple[float, list[Any], dict[str, float]]:
    """Make every request (path and headers) at once; the time until the last one has sent
    ``marker``, the connections (still open), and how busy each of ``cpus`` (the server's, the
    load's) was meanwhile.

    The client's cyclic collector is off while they connect: with thousands of connections
    alive, each of its full collections pauses the client for 50-200 ms, and a pause counts in
    the storm's time, most of all in the bare app's, where the client is the bottleneck."""
    connections = [SSEConnection(HOST, port) for _ in requests]

    async def connect(connection: SSEConnection, path: str, headers: dict[str, str]) -> float:
        status = await connection.open("GET", path, headers)
        assert status == 200, status
        await connection.read_until(marker)
        return time.perf_counter() - start

    gc.collect()
    gc.disable()
    try:
        before = {name: cpus_idle(chosen) for name, chosen in cpus.items()}
        start = time.perf_counter()
        times = await asyncio.gather(*(connect(c, *r) for c, r in zip(connections, requests, strict=True)))
        busy = {name: _busy_share(before[name], chosen) for name, chosen in cpus.items()}
    finally:
        gc.enable()
    return max(times), connections, busy


async def storm_turn(
    ports: dict[str, int],
    clients: list[tuple[str, str]],
    pids: dict[str, int],
    redis_url: str,
    server_cpus: set[int] | None,
) -> dict[str, float]:
    """One storm of each app, the bare app's first, then the site's floor (its own async view
    behind its middleware): as many answers as ``clients``, then ``clients``, each a session
    resumed with its owner's token. With the CPUs split, how busy the server's and the load's
    CPUs were during each: which side the storm's time was bound by."""
    import redis

    count = len(clients)
    cpus = {"server": server_cpus, "load": fanout.load_cpus()} if server_cpus else {}
    floors: dict[str, float] = {}
    for app in ("bare", "site"):
        cpu = cpu_seconds(pids[app])
        seconds, answered, busy = await connect_all(ports[app], [("/hello", {})] * count, b'"ok"', cpus)
        floors[f"{app}_cpu_us"] = (cpu_seconds(pids[app]) - cpu) / count * 1e6
        floors[f"{app}_s"] = seconds
        floors.update({f"{app}_{name}_busy": share for name, share in busy.items()})
        for connection in answered:
            connection.close()
        await asyncio.sleep(2)
    before = rss_kb(pids["helix"])
    helix_cpu = cpu_seconds(pids["helix"])
    resumes = [(f"/api/chat/{session}", {"Authorization": f"Token {token}"}) for session, token in clients]
    helix_s, connections, helix_busy = await connect_all(ports["helix"], resumes, b"stream-open", cpus)
    helix_cpu = cpu_seconds(pids["helix"]) - helix_cpu
    await asyncio.sleep(2)
    after = rss_kb(pids["helix"])
    client = redis.Redis.from_url(redis_url)
    redis_connections = sum(1 for c in client.client_list() if c.get("name") == f"helix-streams-{pids['helix']}")
    for connection in connections:
        connection.close()
    await asyncio.sleep(5)  # let the server release thousands of readers before the next storm
    return {
        "helix_s": helix_s,
        "helix_cpu_us": helix_cpu / count * 1e6,
        "kb_per_stream": (after - before) / count,
        "redis_connections": redis_connections,
        **{f"helix_{name}_busy": share for name, share in helix_busy.items()},
        **floors,
    }


def _shares(turn: dict[str, float], app: str) -> str:
    if f"{app}_load_busy" not in turn:
        return ""
    return f" (server CPU {turn[f'{app}_server_busy']:.0%} busy, load CPUs {turn[f'{app}_load_busy']:.0%})"


def storm_phase(args: argparse.Namespace, ports: dict[str, int], pids: dict[str, int]) -> list[Row]:
    """The storm in ``--storm-turns`` turns of each app, taking turns: each row is the median of
    its turns. A storm takes a second or two, as fast as the machine is in those seconds; the
    first turn is the servers' first storm (a fresh process, as after a restart), the later ones
    the same sessions resumed again by the same processes. Memory and Redis connections are the
    first turn's."""
    # As many people as streams, each resuming with a token of their own (a storm's clients are
    # the users of the site, not one user with thousands of tabs).
    users = storm_users(args.idle)
    sessions = sessions_with_streams(args.redis_url, [user for user, _ in users], args.idle)
    clients = [(session, token) for session, (_, token) in zip(sessions, users, strict=True)]
    turns = []
    for turn in range(args.storm_turns):
        progress(f"reconnect storm: {args.idle:,} streams ({turn + 1} of {args.storm_turns})")
        turns.append(asyncio.run(storm_turn(ports, clients, pids, args.redis_url, args.server_cpus)))
        last = turns[-1]
        progress(
            f"  Helix {last['helix_s']:.2f} s, {last['helix_cpu_us']:.0f} us per resume{_shares(last, 'helix')}; "
            f"bare app {last['bare_s']:.2f} s, {last['bare_cpu_us']:.0f} us per answer{_shares(last, 'bare')}; "
            f"site floor {last['site_s']:.2f} s, {last['site_cpu_us']:.0f} us per answer{_shares(last, 'site')}"
        )
    storm = {key: statistics.median(turn[key] for turn in turns) for key in turns[0]}
    first = turns[0]
    shares = []
    if "helix_load_busy" in storm:
        shares.append(
            Row(
                "that storm: server CPU / load CPUs busy while it lasted (with one load CPU, the side near 100% bounds it)",
                f"{storm['helix_server_busy']:.0%} / {storm['helix_load_busy']:.0%}",
                f"{storm['bare_server_busy']:.0%} / {storm['bare_load_busy']:.0%}",
                target="information",
            )
        )
    return [
        Row(
            f"{args.idle:,} clients connecting at once, all served (Helix: idle streams; bare app: answers),"
            f" the median of {args.storm_turns} turns",
            f"{storm['helix_s']:.2f} s",
            f"{storm['bare_s']:.2f} s",
            storm["helix_s"] / storm["bare_s"],
            "<= 2.5",
        ),
        # The wall times above include the client's own time to open its connections, which the
        # bare app's answers mostly hide: the server's CPU per connection is the cost ops size by.
        Row(
            "that storm: server CPU per connection (Helix: a resume; bare app: an answer)",
            f"{storm['helix_cpu_us']:.0f} us",
            f"{storm['bare_cpu_us']:.0f} us",
            storm["helix_cpu_us"] / storm["bare_cpu_us"],
            "information",
        ),
        *shares,
        # The same two against the site's own async view behind its middleware: what Helix adds
        # to what any request of this site costs.
        Row(
            "that storm against the site's floor (its own async view answering, behind its middleware)",
            f"{storm['helix_s']:.2f} s",
            f"{storm['site_s']:.2f} s",
            storm["helix_s"] / storm["site_s"],
            "information",
        ),
        Row(
            "that storm: server CPU per connection against the site's floor",
            f"{storm['helix_cpu_us']:.0f} us",
            f"{storm['site_cpu_us']:.0f} us",
            storm["helix_cpu_us"] / storm["site_cpu_us"],
            "information",
        ),
        Row("memory per idle stream (RSS growth / streams)", f"{first['kb_per_stream']:.0f} KB", target="<= 80 KB"),
        Row("Redis connections of that process", f"{first['redis_connections']:.0f}", target="<= 4"),
    ]


# -- session feeds ---------------------------------------------------------------------------------


async def feeds_turn(
    port: int, pid: int, clients: list[tuple[str, str]], token: str, redis_url: str, runs: int
) -> dict[str, float]:
    """``clients`` idle feeds opened at once, and as many idle streams of the same sessions (the
    baseline: what an idle resumed stream holds), each kind measured once before the other and
    once after; then, with ``clients`` feeds open, ``runs``
    chats posted in one tab while a second tab of the session follows its feed: when it hears
    the run start it loads the snapshot and resumes, as ``useResumableChat`` does. Each run's
    first token in the second tab, against the first token in the tab that posted."""
    import redis

    auth = {"Authorization": f"Token {token}"}
    kinds = {
        "feed": (
            [(f"/api/chat/{session}/feed", {"Authorization": f"Token {key}"}) for session, key in clients],
            b"event: run",
        ),
        "stream": (
            [(f"/api/chat/{session}", {"Authorization": f"Token {key}"}) for session, key in clients],
            b"stream-open",
        ),
    }
    # The first batch a process holds costs more than the next (its first allocations, its warm
    # caches): each kind is measured once first and once second, all closed in between.
    growth: dict[str, list[float]] = {"feed": [], "stream": []}
    held: dict[str, list[Any]] = {}
    for order in (("feed", "stream"), ("stream", "feed")):
        for kind in order:
            before = rss_kb(pid)
            _, held[kind], _ = await connect_all(port, *kinds[kind], {})
            await asyncio.sleep(2)
            growth[kind].append((rss_kb(pid) - before) / len(clients))
        if order[0] == "feed":
            for connection in [*held["feed"], *held["stream"]]:
                connection.close()
            await asyncio.sleep(5)
    for connection in held["stream"]:
        connection.close()
    feed_connections = held["feed"]  # open while the runs below are watched
    client = redis.Redis.from_url(redis_url)
    redis_connections = sum(1 for c in client.client_list() if c.get("name") == f"helix-streams-{pid}")

    async def first_token(connection: SSEConnection, start: float) -> float:
        await connection.read_until(b'"type":"text-delta"')
        return time.perf_counter() - start

    own, other = [], []
    for index in range(runs):
        session = str(uuid.uuid4())
        MADE.append(session)
        body = {"Content-Type": "application/json", **auth}
        first = SSEConnection(HOST, port)
        assert await first.open("POST", f"/api/chat/{session}", body, json.dumps({"message": "Hi"}).encode()) == 200
        await first.read_until(b"[DONE]")
        first.close()
        feed = SSEConnection(HOST, port)
        assert await feed.open("GET", f"/api/chat/{session}/feed", auth) == 200
        await feed.read_until(b'"status":"ended"')

        async def second_tab(start: float, feed: SSEConnection = feed, session: str = session) -> float:
            await feed.read_until(b'"status":"active"')
            snapshot = SSEConnection(HOST, port)
            assert await snapshot.open("GET", f"/api/chat/{session}/snapshot", auth) == 200
            snapshot.close()
            resume = SSEConnection(HOST, port)
            assert await resume.open("GET", f"/api/chat/{session}", auth) == 200
            try:
                return await first_token(resume, start)
            finally:
                resume.close()

        posting = SSEConnection(HOST, port)
        start = time.perf_counter()
        waiting = asyncio.ensure_future(second_tab(start))
        message = json.dumps({"message": f"Question {index}"}).encode()
        assert await posting.open("POST", f"/api/chat/{session}", body, message) == 200
        own.append(await first_token(posting, start))
        other.append(await asyncio.wait_for(waiting, 10))
        await posting.read_until(b"[DONE]")
        posting.close()
        feed.close()
    for connection in feed_connections:
        connection.close()
    await asyncio.sleep(3)
    return {
        "kb_per_feed": statistics.mean(growth["feed"]),
        "kb_per_stream": statistics.mean(growth["stream"]),
        "redis_connections": redis_connections,
        "own_p50": statistics.median(own),
        "other_p50": statistics.median(other),
        "other_p99": statistics.quantiles(other, n=100, method="inclusive")[98],
        "other_max": max(other),
    }


def feeds_phase(args: argparse.Namespace, token: str, ports: dict[str, int], pids: dict[str, int]) -> list[Row]:
    """Session feeds: idle ones (memory, Redis connections) and a run's news reaching a second
    tab while ``--idle`` feeds are open on the process."""
    users = storm_users(args.feeds)
    sessions = sessions_with_streams(args.redis_url, [user for user, _ in users], args.feeds)
    clients = [(session, key) for session, (_, key) in zip(sessions, users, strict=True)]
    progress(f"session feeds: {args.feeds:,} idle, then {args.feed_runs} runs seen from a second tab")
    feeds = asyncio.run(feeds_turn(ports["helix"], pids["helix"], clients, token, args.redis_url, args.feed_runs))
    return [
        Row(
            "memory per idle session feed (RSS growth / feeds) against an idle stream's",
            f"{feeds['kb_per_feed']:.0f} KB",
            f"{feeds['kb_per_stream']:.0f} KB",
            feeds["kb_per_feed"] / feeds["kb_per_stream"] if feeds["kb_per_stream"] > 0 else float("nan"),
            "<= 1",
        ),
        Row(
            "Redis connections of that process, with the feeds open", f"{feeds['redis_connections']:.0f}", target="<= 4"
        ),
        Row(
            f"a run posted in one tab: its first token in a second tab (feed, snapshot, resume), with {args.feeds:,}"
            f" feeds open; p99 of {args.feed_runs} (max {feeds['other_max'] * 1e3:.0f} ms)",
            f"{feeds['other_p99'] * 1e3:.0f} ms",
            f"{feeds['own_p50'] * 1e3:.0f} ms",
            feeds["other_p99"] / feeds["own_p50"],
            "<= 1 s",
        ),
        Row(
            "that first token in the second tab against the posting tab's, p50",
            f"{feeds['other_p50'] * 1e3:.0f} ms",
            f"{feeds['own_p50'] * 1e3:.0f} ms",
            feeds["other_p50"] / feeds["own_p50"],
            "information",
        ),
    ]


# -- live fan-out ------------------------------------------------------------------------------------


def fanout_phase(
    args: argparse.Namespace, user_id: int, token: str, ports: dict[str, int], pids: dict[str, int]
) -> list[Row]:
    targets = {
        "helix": fanout.Target("helix", ports["helix"], pids["helix"], token),
        "fanout": fanout.Target("fanout", ports["bare"], pids["bare"]),
    }

    def streams(kind: str) -> Any:
        if kind == "helix":
            return lambda n: sessions_with_streams(args.redis_url, user_id, n)
        return lambda n: bare_streams(args.redis_url, n)  # streams of the store, written as Helix's

    load = {"rate": args.rate, "seconds": args.seconds, "processes": args.client_processes, "niceness": args.niceness}
    rows: list[Row] = []
    # Helix and the bare app take turns, and each one's median load is its figure: a load a few
    # seconds long is as fast as the machine is in those seconds, and it varies from one to the next.
    measured: dict[str, list[fanout.Load]] = {kind: [] for kind in targets}
    for turn in range(args.cpu_turns):
        for kind, target in targets.items():
            progress(f"{kind}: CPU per event, {args.cpu_streams} streams ({turn + 1} of {args.cpu_turns})")
            measured[kind].append(fanout.measure(target, streams(kind)(args.cpu_streams), args.redis_url, **load))
            progress(f"{kind}: {measured[kind][-1].cpu_us_per_event:.1f} us per delivered event")
    cpu = {
        kind: sorted(loads, key=lambda load: load.cpu_us_per_event)[len(loads) // 2] for kind, loads in measured.items()
    }
    rows.append(
        Row(
            f"server CPU per delivered event, {args.cpu_streams} streams x {args.rate:.0f} events/s, median of "
            f"{args.cpu_turns} turns ({cpu['helix'].received:,} / {cpu['fanout'].received:,} events delivered)",
            f"{cpu['helix'].cpu_us_per_event:.1f} us",
            f"{cpu['fanout'].cpu_us_per_event:.1f} us",
            cpu["helix"].cpu_us_per_event / cpu["fanout"].cpu_us_per_event,
            "<= 1.5",
        )
    )
    best, loads = {}, {}
    for kind, target in targets.items():
        best[kind], loads[kind] = fanout.sustainable(target, streams(kind), args.redis_url, args.steps, **load)
    # A knee where the load's own CPUs were saturated is the machine's, not the server's: say so.
    bound = [kind for kind in targets if any(load.load_bound for load in _knee_failures(loads[kind]))]
    caveat = f"; load-bound where {' and '.join(bound)} failed" if bound else ""
    rows.append(
        Row(
            f"sustainable streams x {args.rate:.0f} events/s on one process (all delivered, p99 <= 20 ms{caveat})",
            f"{best['helix']:,}",
            f"{best['fanout']:,}",
            best["helix"] / best["fanout"] if best["fanout"] else None,
            ">= 0.7",
        )
    )
    at = {}
    for kind, target in targets.items():
        known = [load for load in loads[kind] if load.streams == args.active]  # its last try counted
        at[kind] = known[-1] if known else fanout.measure(target, streams(kind)(args.active), args.redis_url, **load)
    helix, bare = at["helix"], at["fanout"]
    rows.append(
        Row(
            f"{args.active} streams x {args.rate:.0f} events/s: write -> client p50 / p99 (share delivered)",
            f"{helix.p50:.2f} / {helix.p99:.2f} ms ({helix.delivered:.1%})",
            f"{bare.p50:.2f} / {bare.p99:.2f} ms ({bare.delivered:.1%})",
            None,
            "p99 <= 20 ms, all delivered",
        )
    )
    return rows


def _knee_failures(loads: list[fanout.Load]) -> list[fanout.Load]:
    """The tries of the smallest stream count that was not sustained (both its tries failed):
    the load just above the knee, which bounds it."""
    passed = {load.streams for load in loads if load.sustained}
    failed = [load for load in loads if load.streams not in passed]
    smallest = min((load.streams for load in failed), default=None)
    return [load for load in failed if load.streams == smallest]


# -- replay and resume -----------------------------------------------------------------------------

#: Replays of each app measured, each of Helix's followed by a pause, the bare app's and three raw
#: reads: the medians are taken over a second or two, so that a stall of the machine of a few
#: hundred milliseconds (as long as seven replays took) cannot move them.
REPLAYS = 21
REPLAY_PAUSE = 0.05


class RawReads:
    """The raw operations, each timed when asked for, between the app's measurements so that
    both see the machine as it is at that moment: XRANGE of the whole stream + decoding its
    entries, and one XRANGE page from the middle (sync redis-py with hiredis, as the store reads).

    With ``cpus`` (the servers' CPUs of ``--split-cpus``), each is made on those CPUs, which the
    servers leave idle meanwhile: Helix decodes its entries on its server's CPU, so the raw
    decode runs there too (one CPU of a virtual machine can be slower than another for minutes)."""

    def __init__(self, redis_url: str, session_id: str, chunks: int, page_size: int, cpus: set[int] | None) -> None:
        import redis

        from streams.backends import RedisStreamManager

        self.client = redis.Redis.from_url(redis_url)
        self.client.set_response_callback("XRANGE", lambda response, **options: response)  # no dict per entry
        self.key = RedisStreamManager(redis_url)._keys(session_id)[0]
        self.middle, self.page_size = f"{chunks // 2 + 1}-0", page_size
        self.cpus = cpus
        self.full_s: list[float] = []
        self.page_s: list[float] = []

    @contextlib.contextmanager
    def _on_cpus(self) -> Iterator[None]:
        if self.cpus is None:
            yield
            return
        load = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.cpus)  # this thread only: the load's other threads stay
        try:
            yield
        finally:
            os.sched_setaffinity(0, load)

    def full(self) -> None:
        from streams.protocol import decode_chunks

        with self._on_cpus():
            t0 = time.perf_counter()
            entries = self.client.xrange(self.key, "-", "+")
            decode_chunks([fields[1] for _, fields in entries])
            self.full_s.append(time.perf_counter() - t0)

    def page(self) -> None:
        with self._on_cpus():
            t0 = time.perf_counter()
            self.client.xrange(self.key, self.middle, "+", count=self.page_size)
            self.page_s.append(time.perf_counter() - t0)


async def count_events(connection: SSEConnection, expected: int, *, already: bytes = b"") -> float:
    """The time until ``expected`` text deltas have come (counting those in ``already``, read before)."""
    start = time.perf_counter()
    seen, tail = already.count(b"text-delta"), already[-9:]
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


async def bench_rate(
    ports: dict[str, int], token: str, session_id: str, chunks: int, redis_url: str, raw: RawReads
) -> dict[str, float]:
    import redis

    port, bare_port = ports["helix"], ports["bare"]
    headers = {"Authorization": f"Token {token}"}
    ours, bare = [], []
    for _ in range(2 + REPLAYS):  # the first two of each warm the processes up, unmeasured
        connection = SSEConnection(HOST, port)
        t0 = time.perf_counter()
        await connection.open("GET", f"/api/chat/{session_id}", headers)
        ours.append(await count_events(connection, chunks) + (connection.first_byte_at - t0))
        connection.close()
        # The pause here, before the bare app's replay (a row for information only): Helix's
        # replay and the raw reads each follow the other's work, as without a pause.
        await asyncio.sleep(REPLAY_PAUSE)
        base = SSEConnection(HOST, bare_port)
        t0 = time.perf_counter()
        await base.open("GET", f"/events?n={chunks}", {})
        bare.append(await count_events(base, chunks) + (base.first_byte_at - t0))
        base.close()
        for _ in range(3):
            raw.full()
    del ours[:2], bare[:2], raw.full_s[:6]
    first, hello, site_hello = await resumes(
        ports, session_id, {**headers, "Last-Event-ID": str(chunks // 2)}, chunks - chunks // 2, raw
    )
    # Near the head of the live stream, each resume catches up and subscribes to its tail. The
    # connections Redis accepts meanwhile (INFO, on a connection of ours made before) are Helix's.
    stats = redis.Redis.from_url(redis_url)
    connections = redis_connections_made(stats)
    head, head_hello, head_site_hello = await resumes(
        ports, session_id, {**headers, "Last-Event-ID": str(chunks - 10)}, 10, raw
    )
    return {
        "ours_s": statistics.median(ours),
        "bare_s": statistics.median(bare),
        "full_s": statistics.median(raw.full_s),
        "first_event_s": statistics.median(first),
        "hello_s": statistics.median(hello),
        "site_hello_s": statistics.median(site_hello),
        "head_site_hello_s": statistics.median(head_site_hello),
        "page_s": statistics.median(raw.page_s),
        "head_s": statistics.median(head),
        "head_hello_s": statistics.median(head_hello),
        "head_connections": redis_connections_made(stats) - connections,
    }


async def resumes(
    ports: dict[str, int], session_id: str, headers: dict[str, str], rest: int, raw: RawReads
) -> tuple[list[float], list[float], list[float]]:
    """20 resumes one after another, each timed until its first event and then read on, as a
    client does, until the ``rest`` of the stream's chunks have come; and after each a round trip
    of the bare app, one of the site's floor and a raw page read (``raw.page()``): their times. (A
    client that left at its first event would leave the server still reading ahead for it while
    the next resume is timed.)"""
    port = ports["helix"]
    first: list[float] = []
    hellos: dict[str, list[float]] = {"bare": [], "site": []}
    for _ in range(20):
        connection = SSEConnection(HOST, port)
        t0 = time.perf_counter()
        await connection.open("GET", f"/api/chat/{session_id}", headers)
        seen = await asyncio.wait_for(connection.read_until(b"data: {"), 10)
        first.append(time.perf_counter() - t0)
        await count_events(connection, rest, already=seen)
        connection.close()
        for app, times in hellos.items():
            base = SSEConnection(HOST, ports[app])
            t0 = time.perf_counter()
            await base.open("GET", "/hello", {})
            await base.read_until(b'"ok"')
            times.append(time.perf_counter() - t0)
            base.close()
        raw.page()
    return first, hellos["bare"], hellos["site"]


def redis_connections_made(client: Any) -> int:
    """Connections Redis has accepted so far (``INFO stats``)."""
    return int(client.info("stats")["total_connections_received"])


def rate_phase(args: argparse.Namespace, user_id: int, token: str, ports: dict[str, int]) -> list[Row]:
    from streams.backends import RedisStreamManager

    [session_id] = sessions_with_streams(args.redis_url, user_id, 1, args.chunks)
    progress("replay and resume")
    page_size = RedisStreamManager.page_size
    raw = RawReads(args.redis_url, session_id, args.chunks, page_size, args.server_cpus)
    rate = asyncio.run(bench_rate(ports, token, session_id, args.chunks, args.redis_url, raw))
    resume_floor = rate["page_s"] + rate["hello_s"]
    return [
        Row(
            f"full replay of a {args.chunks:,}-chunk run over HTTP, vs XRANGE + parse of its entries",
            f"{rate['ours_s'] * 1e3:.1f} ms",
            f"{rate['full_s'] * 1e3:.1f} ms",
            rate["ours_s"] / rate["full_s"],
            "<= 2",
        ),
        Row(
            f"resume from the middle: first event, vs one XRANGE page ({page_size}) + one bare-app round trip",
            f"{rate['first_event_s'] * 1e3:.2f} ms",
            f"{resume_floor * 1e3:.2f} ms",
            rate["first_event_s"] / resume_floor,
            "<= 2",
        ),
        Row(
            "resume at the head of a live stream (10 chunks behind): first event, vs one XRANGE page + one bare-app"
            f" round trip; Redis connections opened by its 20 resumes: {rate['head_connections']:.0f}",
            f"{rate['head_s'] * 1e3:.2f} ms",
            f"{(rate['page_s'] + rate['head_hello_s']) * 1e3:.2f} ms",
            rate["head_s"] / (rate["page_s"] + rate["head_hello_s"]),
            "<= 2",
        ),
        # The same two against a round trip of the site's own async view behind its middleware,
        # which any request of the site pays before Helix's first byte.
        Row(
            "resume from the middle: first event, vs one XRANGE page + one round trip of the site's floor",
            f"{rate['first_event_s'] * 1e3:.2f} ms",
            f"{(rate['page_s'] + rate['site_hello_s']) * 1e3:.2f} ms",
            rate["first_event_s"] / (rate["page_s"] + rate["site_hello_s"]),
            "information",
        ),
        Row(
            "resume at the head of a live stream: first event, vs one XRANGE page + one round trip of the site's floor",
            f"{rate['head_s'] * 1e3:.2f} ms",
            f"{(rate['page_s'] + rate['head_site_hello_s']) * 1e3:.2f} ms",
            rate["head_s"] / (rate["page_s"] + rate["head_site_hello_s"]),
            "information",
        ),
        Row(
            f"one connection, {args.chunks:,} events: Helix replay vs the bare app's one send per event",
            f"{args.chunks / rate['ours_s']:,.0f}/s",
            f"{args.chunks / rate['bare_s']:,.0f}/s",
            rate["bare_s"] / rate["ours_s"],
            ">= 0.5 (information)",
        ),
    ]


# -- POST ----------------------------------------------------------------------------------------


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
    return {"first_byte_p50": statistics.median(first_byte), "first_event_p50": statistics.median(first_event)}


def post_phase(token: str, ports: dict[str, int]) -> list[Row]:
    progress("POST to first byte")
    post = asyncio.run(bench_post(ports["helix"], token, 20))
    return [
        Row(
            "POST -> first SSE byte / first event, p50 (Celery, scripted chat; information)",
            f"{post['first_byte_p50'] * 1e3:.1f} / {post['first_event_p50'] * 1e3:.1f} ms",
        )
    ]


# -- the run -------------------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_database(url: str | None, workdir: Path) -> Any:
    """The URL of a database of its own for this run: a new PostgreSQL database on the server of
    ``url`` (dropped afterwards), or with no ``url`` a SQLite file in ``workdir``."""
    if url is None:
        yield f"sqlite:///{workdir / 'bench.sqlite3'}"
        return
    import psycopg
    from psycopg import sql

    name = f"helix_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _postmaster_pid(database_url: str) -> int | None:
    """The pid of the local PostgreSQL server behind ``database_url``, if it runs on this machine."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SHOW data_directory")
        directory = Path(cursor.fetchone()[0])
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((directory / "postmaster.pid").read_text().split()[0])
    return None


def pin(
    split: bool, redis_url: str, database_url: str, server_pids: list[int], load_pids: list[int]
) -> set[int] | None:
    """With ``split``: the servers on the first CPU; this process, the load, ``load_pids`` (the
    Celery worker, with its pool) and a local Redis and PostgreSQL on the others. The servers'
    CPUs, or ``None`` when not split."""
    if not split:
        return None
    import redis

    cpus = sorted(os.sched_getaffinity(0))
    load = set(cpus[1:]) or set(cpus)
    os.environ["HELIX_BENCH_LOAD_CPUS"] = ",".join(str(c) for c in sorted(load))
    for pid in server_pids:
        os.sched_setaffinity(pid, {cpus[0]})
    os.sched_setaffinity(0, load)
    for pid in [*load_pids, *(child for parent in load_pids for child in _children(parent))]:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, load)
    with contextlib.suppress(Exception):  # a Redis of this machine: another machine's, as it were
        os.sched_setaffinity(int(redis.Redis.from_url(redis_url).info("server")["process_id"]), load)
    postmaster = _postmaster_pid(database_url)
    if postmaster is not None:  # as Redis; its backends (new ones inherit the postmaster's CPUs)
        for pid in [postmaster, *_children(postmaster)]:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(pid, load)
    return {cpus[0]}


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server to make this run's database on (default: a SQLite file, in the server's process)",
    )
    parser.add_argument("--server", choices=SERVERS, default="daphne")
    parser.add_argument("--idle", type=int, default=5000, help="clients of the reconnect storm")
    parser.add_argument("--storm-turns", type=int, default=3, help="storms of each app, in turns")
    parser.add_argument("--rate", type=float, default=20.0, help="events per second per live stream")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each live load")
    parser.add_argument("--cpu-streams", type=int, default=100, help="streams of the CPU-per-event load")
    parser.add_argument("--cpu-turns", type=int, default=3, help="loads of each app for the CPU per event, in turns")
    parser.add_argument("--active", type=int, default=300, help="streams of the fixed live row")
    parser.add_argument("--steps", type=int, nargs="+", default=STEPS, help="stream counts the fan-out steps through")
    parser.add_argument("--feeds", type=int, default=1000, help="idle session feeds open during the feeds phase")
    parser.add_argument("--feed-runs", type=int, default=50, help="runs watched from a second tab")
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--client-processes", type=int, default=2, help="processes the live clients share")
    parser.add_argument("--niceness", type=int, default=LOAD_NICENESS, help="niceness of the load processes")
    parser.add_argument("--split-cpus", action="store_true", help="servers on the first CPU, load on the others")
    parser.add_argument(
        "--phases",
        nargs="+",
        default=["storm", "fanout", "rate", "post", "feeds"],
        choices=["storm", "fanout", "rate", "post", "feeds"],
    )
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    workdir = Path(tempfile.mkdtemp(prefix="helix-bench-http-"))
    with fresh_database(args.database_url, workdir) as database_url:
        run(args, workdir, database_url)


def run(args: argparse.Namespace, workdir: Path, database_url: str) -> None:
    setup_django(database_url, args.redis_url)
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    from streams.backends import RedisStreamManager

    user = User.objects.create_user("bench", password="bench-pw")
    token = Token.objects.create(user=user).key
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    env = {
        "DATABASE_URL": database_url,
        "REDIS_URL": args.redis_url,
        "HELIX_STREAM_BACKEND": "redis",
        "HELIX_EXECUTOR": "celery",
        "HELIX_CELERY_QUEUE": queue,
        "HELIX_SCRIPTED_DELAY_MS": "20",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
    }
    helix_env = {**env, "HELIX_CHAT_RATE": "100000/minute", "HELIX_MAX_STREAMS_PER_CALLER": "1000000"}
    helix_port, helix = serve(args.server, "helix_site.asgi:application", helix_env, workdir / "helix.log")
    site_port, site = serve(
        args.server,
        "helix_site.asgi:application",
        {**helix_env, "DJANGO_SETTINGS_MODULE": "bench.site_floor"},
        workdir / "site.log",
    )
    bare_port, bare = serve(
        args.server,
        "bench.raw_asgi:application",
        {"FANOUT_REDIS_URL": args.redis_url, "FANOUT_KEY_PREFIX": RedisStreamManager(args.redis_url).key_prefix},
        workdir / "bare.log",
    )
    worker = start(
        [sys.executable, "-m", "celery", "-A", "helix_site", "worker", "--loglevel=WARNING", "-n", f"{queue}@%h"],
        env,
        workdir / "worker.log",
    )
    ports = {"helix": helix_port, "bare": bare_port, "site": site_port}
    pids = {"helix": helix.pid, "bare": bare.pid, "site": site.pid}
    rows: list[Row] = []
    try:
        wait_port(helix_port)
        wait_port(bare_port)
        wait_port(site_port)
        args.server_cpus = pin(
            args.split_cpus, args.redis_url, database_url, [helix.pid, bare.pid, site.pid], [worker.pid]
        )
        time.sleep(2)
        progress(f"servers up ({args.server})")
        if "storm" in args.phases:
            rows += storm_phase(args, ports, pids)
        if "fanout" in args.phases:
            rows += fanout_phase(args, user.pk, token, ports, pids)
        if "rate" in args.phases:
            rows += rate_phase(args, user.pk, token, ports)
        if "post" in args.phases:
            rows += post_phase(token, ports)
        if "feeds" in args.phases:
            rows += feeds_phase(args, token, ports, pids)
    finally:
        stop(helix, bare, site, worker)
        forget_streams(args.redis_url, queue)
    from django.db import connection

    cpus = "split CPUs" if args.split_cpus else "shared CPUs"
    print(f"\n{args.server}, {cpus}, {connection.vendor}\n")
    print("| measure | Helix | baseline | ratio | target |\n|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row.cells()) + " |")


if __name__ == "__main__":
    main()
