"""The reconnect storm in-process: the server's CPU per resume without a server or a network.

    python -m bench.storm --redis-url redis://127.0.0.1:6379/15 [--streams 3000] [--rounds 3] [--census]
        [--runs 1] [--database-url postgres://…]

The demo site's ASGI application (``helix_site.asgi``: its collector settings too) is called
directly with ASGI scopes, as a server would call it, for ``--streams`` idle streams at once, each
resumed by a user of its own with a token of its own; a round ends when every stream has sent its
opening comment, and the streams are then closed. Each round prints the process's CPU time per
resume, the collector's time per generation (``gc.callbacks``) and, with ``--census``, the objects
the collector tracks per open stream. The bare app's ``/hello`` (``bench/raw_asgi.py``) answers as
many requests the same way in the same run, as the baseline. Pin the process to one CPU
(``taskset -c 0``) as ``bench/http.py --split-cpus`` pins the server: the database thread and the
event loop then take turns, as they do there. Alternate two trees with it to see what a change does to a
storm's CPU; the machine's noise is smaller here than through a server and the network, not absent.

``--runs``: each session a chat of that many runs so far (a resume reads the latest). Uses its own
SQLite database file (or a fresh database on the PostgreSQL server of ``--database-url``) and the
given Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from tooling.site import setup_django

Application = Any


class CollectorClock:
    """The collector's time and collections per generation, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        self.seconds[generation] += time.perf_counter() - self._started
        self.collections[generation] += 1

    def take(self) -> str:
        text = ", ".join(
            f"gen{g} {n} in {s * 1e3:.0f} ms"
            for g, (n, s) in enumerate(zip(self.collections, self.seconds, strict=True))
        )
        self.seconds, self.collections = [0.0, 0.0, 0.0], [0, 0, 0]
        return text


def scope_of(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }


async def storm(
    application: Application, scopes: list[dict[str, Any]], marker: bytes
) -> tuple[float, list[asyncio.Future[None]], asyncio.Event]:
    """Call ``application`` for every scope at once: the CPU seconds until every response has
    sent ``marker``, the calls (a stream's runs on) and the event that makes every client leave."""
    leave = asyncio.Event()
    seen = 0
    all_seen = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal seen
        if message["type"] == "http.response.body" and marker in message.get("body", b""):
            seen += 1
            if seen == len(scopes):
                all_seen.set()

    started = time.process_time()
    calls = [asyncio.ensure_future(application(scope, receive, send)) for scope in scopes]
    await all_seen.wait()
    cpu = time.process_time() - started
    return cpu, calls, leave


def census(streams: int) -> str:
    counts = collections.Counter(type(o).__name__ for o in gc.get_objects())
    per = len(gc.get_objects()) / streams
    common = ", ".join(f"{name} {count / streams:.1f}" for name, count in counts.most_common(8))
    return f"{per:.0f} tracked objects per open stream ({common})"


async def round_of(helix: Application, bare: Application, clients: list[tuple[str, str]], show_census: bool) -> None:
    """One storm of the bare app, then one of Helix: ``clients`` are ``(path, token)``."""
    paths = [path for path, _ in clients]
    clock = CollectorClock()
    bare_cpu, bare_calls, bare_leave = await storm(bare, [scope_of("/hello", []) for _ in paths], b'"ok"')
    bare_leave.set()
    await asyncio.gather(*bare_calls)
    clock.take()
    scopes = [scope_of(path, [(b"authorization", f"Token {token}".encode())]) for path, token in clients]
    cpu, calls, leave = await storm(helix, scopes, b"stream-open")
    collector = clock.take()
    per, bare_per = cpu / len(paths) * 1e6, bare_cpu / len(paths) * 1e6
    print(
        f"{len(paths):,} resumes: {per:.0f} us of CPU each; bare app {bare_per:.0f} us per answer ({per / bare_per:.1f}x);"
        f" collector: {collector}"
    )
    if show_census:
        print("  " + census(len(paths)))
    leave.set()
    await asyncio.gather(*calls)
    gc.callbacks.remove(clock._callback)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--streams", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--census", action="store_true", help="count the tracked objects per open stream")
    parser.add_argument("--runs", type=int, default=1, help="runs of each session so far, the last one running")
    parser.add_argument("--database-url", help="a PostgreSQL server to make this run's database on")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
    from bench.http import fresh_database

    with fresh_database(args.database_url, Path(tempfile.mkdtemp())) as database_url:
        run(args, database_url)


def run(args: argparse.Namespace, database_url: str) -> None:
    setup_django(database_url, args.redis_url)

    from bench.http import forget_streams, sessions_with_streams, storm_users

    # As in bench/http.py: each stream's client is a user of its own, with its own token.
    users = storm_users(args.streams)
    sessions = sessions_with_streams(args.redis_url, [user for user, _ in users], args.streams, runs=args.runs)
    clients = [(f"/api/chat/{session}", token) for session, (_, token) in zip(sessions, users, strict=True)]

    from bench.raw_asgi import application as bare
    from helix_site.asgi import application as helix

    for _ in range(args.rounds):
        asyncio.run(round_of(helix, bare, clients, args.census))
    forget_streams(args.redis_url)


if __name__ == "__main__":
    main()
