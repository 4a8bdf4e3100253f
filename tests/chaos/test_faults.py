"""Faults against the production topology (``tests.chaos.topology``): Redis crashes and restarts under
load, while clients stream answers.

After each fault the same things must hold: every client ended within 5 s of the fault clearing
(or of its run's end, when the run carried on past the fault with nothing lost), with the answer or
a typed error, and with ``data: [DONE]``; no run left non-terminal past twice the
lease after that; no process of the topology died; no message stored twice; the web processes'
memory flat. The README's reliability section quotes the table these tests make true.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from chat.models import Message, Run
from tests.chaos.topology import ChatResult, Topology, chat
from tests.live import use_broker

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 4.0  # the demo site's HELIX["LEASE_SECONDS"]
CLIENTS = 12


@pytest.fixture
def token() -> str:
    user = User.objects.create_user(f"chaos-{time.monotonic_ns()}", password="pw")
    return str(Token.objects.create(user=user).key)


@pytest.fixture(scope="module", params=[False, True], ids=["in-memory", "appendfsync"])
def topology(request: pytest.FixtureRequest, test_database: str) -> Iterator[Topology]:
    site = Topology(
        test_database,
        persistence=request.param,
        extra_env={"HELIX_MAX_STREAMS_PER_CALLER": "1000"},
    )
    site.start()
    previous = use_broker(site.redis.url)
    yield site
    use_broker(previous)
    site.stop()


Chats = dict[str, "asyncio.Task[tuple[str, ChatResult]]"]


async def many_chats(site: Topology, token: str, count: int = CLIENTS) -> Chats:
    """``count`` clients, each asking a research question in a new session, by session id."""
    ports, session_ids = site.ports, [str(uuid.uuid4()) for _ in range(count)]
    tasks = {
        session_id: asyncio.ensure_future(
            chat(ports[i % len(ports)], token, f"Research question {i}", agent="research", session_id=session_id)
        )
        for i, session_id in enumerate(session_ids)
    }
    await asyncio.sleep(1.0)  # every run has started streaming
    return tasks


def run_ends(session_ids: list[str]) -> dict[str, float]:
    """When each session's run ended, on the ``time.monotonic()`` clock (now for a run still open)."""
    from django.utils import timezone

    now_wall, now = timezone.now(), time.monotonic()
    ends = Run.objects.filter(session_id__in=session_ids).values_list("session_id", "finished_at")
    return {str(session): now - (now_wall - end).total_seconds() if end else now for session, end in ends}


async def settle(tasks: Chats, cleared_at: float) -> list[tuple[str, ChatResult]]:
    """Every client's result. A client may stream on past the fault while its run carries on (a
    restart that lost nothing); one still open 5 s after both the fault cleared and its run ended
    hangs, and fails the test."""
    hard_deadline = cleared_at + 60
    while pending := [session_id for session_id, task in tasks.items() if not task.done()]:
        latest = max([cleared_at, *(await sync_to_async(run_ends)(pending)).values()])
        if time.monotonic() > min(latest + 5, hard_deadline):
            for session_id in pending:
                tasks[session_id].cancel()
            raise AssertionError(
                f"{len(pending)} of {len(tasks)} clients hang 5 s after the fault cleared and their runs ended"
            )
        await asyncio.sleep(0.25)
    return [task.result() for task in tasks.values()]


async def check_clients(results: list[tuple[str, ChatResult]], cleared_at: float) -> None:
    ends = await sync_to_async(run_ends)([session_id for session_id, _ in results])
    for session_id, result in results:
        assert result.status == 200, (session_id, result.status, result.body[:300])
        assert result.done, f"{session_id}: the stream did not end with [DONE]: {result.body[-300:]!r}"
        assert result.finished or result.errors, f"{session_id}: neither the answer nor an error"
        deadline = max(cleared_at, ends.get(session_id, cleared_at)) + 5
        assert result.ended_at <= deadline, f"{session_id} ended {result.ended_at - deadline + 5:.1f} s late"
        if result.errors:  # typed: the error names its code
            assert all(":" in error for error in result.errors), result.errors


async def check_runs(session_ids: list[str], cleared_at: float, site: Topology) -> None:
    """No run stuck past twice the lease after ``cleared_at``: each is then finished, or running
    under a live lease (a worker is on it), and every run finishes; no message stored twice."""

    def open_runs() -> list[tuple[str, str, bool]]:
        from django.utils import timezone

        now = timezone.now()
        runs = Run.objects.filter(session_id__in=session_ids, status__in=["queued", "running"])
        return [
            (str(pk), status, bool(status == "running" and expires and expires > now))
            for pk, status, expires in runs.values_list("id", "status", "lease_expires_at")
        ]

    await asyncio.sleep(max(0.0, cleared_at + 2 * LEASE - time.monotonic()))
    stuck = [run for run in await sync_to_async(open_runs)() if not run[2]]
    assert not stuck, f"runs stuck {time.monotonic() - cleared_at:.1f} s after: {stuck}\n{site.log_tail()}"
    deadline = time.monotonic() + 60
    while (remaining := await sync_to_async(open_runs)()) and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
    assert not remaining, f"runs never finished: {remaining}"
    positions = await sync_to_async(
        lambda: list(Message.objects.filter(session_id__in=session_ids).values_list("session_id", "position"))
    )()
    assert len(positions) == len(set(positions)), "a message position was stored twice"


async def crash_redis_under_load(site: Topology, token: str, down: float) -> None:
    """Kill Redis while clients stream, start it again ``down`` seconds later, and check every
    client, every run and every process."""
    tasks = await many_chats(site, token)
    await asyncio.to_thread(site.redis.restart, down)
    cleared_at = time.monotonic()
    results = await settle(tasks, cleared_at)
    await check_clients(results, cleared_at)
    await check_runs([session_id for session_id, _ in results], cleared_at, site)
    assert site.dead_processes() == [], site.log_tail()


async def test_redis_crashes_mid_run_and_comes_back_after_3_s(topology: Topology, token: str) -> None:
    await crash_redis_under_load(topology, token, 3.0)


async def test_five_redis_restarts_under_load_leave_every_worker_alive(topology: Topology, token: str) -> None:
    for _ in range(5):
        await crash_redis_under_load(topology, token, 1.0)
    _, result = await chat(topology.ports[0], token, "Still there?")  # and it still answers
    assert result.finished, result.body[-500:]


def stall_runs(database_url: str, session_ids: list[str], seconds: float) -> None:
    """Stall the database for the workers of these sessions' runs: lock the runs' rows from a
    connection of our own for ``seconds``, so no heartbeat or step can be written while anyone
    can still read them (the reaper sees their leases expire, as in a stall between the
    workers and the database)."""
    import psycopg

    with psycopg.connect(database_url) as connection, connection.transaction():
        connection.execute("SELECT id FROM helix_chat_run WHERE session_id = ANY(%s) FOR NO KEY UPDATE", (session_ids,))
        time.sleep(seconds)


@pytest.mark.parametrize("topology", [False], ids=["in-memory"], indirect=True)  # a database fault
async def test_a_10_s_database_stall_takes_over_no_healthy_run(topology: Topology, token: str) -> None:
    """Heartbeats cannot commit while the runs are locked; the workers' alive marks in Redis
    tell the reaper the runs are healthy, so none is taken over, none fails, none streams an
    error, and a chat posted during the stall is answered once it clears."""
    tasks = await many_chats(topology, token, count=8)
    stall = asyncio.ensure_future(asyncio.to_thread(stall_runs, topology.env["DATABASE_URL"], list(tasks), 10.0))
    await asyncio.sleep(2.0)
    late = str(uuid.uuid4())
    tasks[late] = asyncio.ensure_future(chat(topology.ports[0], token, "Asked during the stall", session_id=late))
    await stall
    cleared_at = time.monotonic()
    results = await settle(tasks, cleared_at)
    await check_clients(results, cleared_at)
    for session_id, result in results:
        assert result.finished and not result.errors, (session_id, result.errors)
    await check_runs([session_id for session_id, _ in results], cleared_at, topology)
    attempts = await sync_to_async(
        lambda: list(Run.objects.filter(session_id__in=list(tasks)).values_list("status", "attempt"))
    )()
    assert attempts == [("completed", 1)] * len(tasks), attempts
    assert topology.dead_processes() == [], topology.log_tail()
