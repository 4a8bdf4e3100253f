"""Faults against the production topology (``tests.chaos.topology``): Redis crashes and restarts under
load, while clients stream answers.

After each fault the same things must hold: every client ended within 5 s of the fault clearing
(or of its run's end, when the run carried on past the fault with nothing lost), with the answer or
a typed error, and with ``data: [DONE]``; no run left non-terminal past twice the
lease after that; no process of the topology died; no message stored twice; the web processes'
memory flat. docs/reliability.md quotes the table these tests make true.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from chat.models import ChatSession, Message, Run
from tests.chaos import report
from tests.chaos.topology import ChatResult, Topology, chat, request, rss_kib
from tests.live import refuses_100_mb_uploads, use_broker
from workers.exceptions import DATABASE_UNAVAILABLE_TEXT

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 4.0  # the demo site's HELIX["LEASE_SECONDS"]
CLIENTS = 12
RETRY_WINDOW = 10  # seconds readers and writers ride out Redis away or full (30 by default)
STATEMENT_TIMEOUT = 12  # seconds PostgreSQL lets a statement wait (a lock, a slow disk) before it cancels it


@pytest.fixture
def token() -> str:
    user = User.objects.create_user(f"chaos-{time.monotonic_ns()}", password="pw")
    return str(Token.objects.create(user=user).key)


@pytest.fixture(scope="module", params=[False, True], ids=["in-memory", "appendfsync"])
def topology(request: pytest.FixtureRequest, test_database: str) -> Iterator[Topology]:
    site = Topology(
        test_database,
        persistence=request.param,
        extra_env={
            "HELIX_MAX_STREAMS_PER_CALLER": "1000",
            "HELIX_SERVER_HEADER_TIMEOUT_SECONDS": "3",
            "HELIX_SLOW_CLIENT_TIMEOUT": "10",
            "HELIX_REDIS_RETRY_TIMEOUT": str(RETRY_WINDOW),
            # As docs/deployment.md advises: a stall past this fails the statement, instead of holding a
            # request or a run for as long as the stall lasts.
            "PGOPTIONS": f"-c statement_timeout={STATEMENT_TIMEOUT}s",
        },
    )
    site.start()
    previous = use_broker(site.redis.url)
    yield site
    use_broker(previous)
    site.stop()


@pytest.fixture(autouse=True)
def revived(request: pytest.FixtureRequest) -> None:
    """A process a previous test let die is started again before the next test of its topology."""
    if "topology" in request.fixturenames:
        request.getfixturevalue("topology").revive()


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


async def settle(tasks: Chats, cleared_at: float, site: Topology) -> list[tuple[str, ChatResult]]:
    """Every client's result. A client may stream on past the fault while its run carries on (a
    restart that lost nothing); one still open 5 s after both the fault cleared and its run ended
    hangs, and fails the test."""
    hard_deadline = cleared_at + 60
    while pending := [session_id for session_id, task in tasks.items() if not task.done()]:
        latest = max([cleared_at, *(await sync_to_async(run_ends)(pending)).values()])
        if time.monotonic() > min(latest + 5, hard_deadline):
            for session_id in pending:
                tasks[session_id].cancel()
            runs = await sync_to_async(lambda: [(str(r.pk), r) for r in Run.objects.filter(session_id__in=pending)])()
            described = [
                f"run {pk} of {r.session_id}: {r.status} attempt {r.attempt} {r.error_code} finished {r.finished_at}"
                for pk, r in runs
            ]
            raise AssertionError(
                f"{len(pending)} of {len(tasks)} clients hang 5 s after the fault cleared and their runs ended: "
                f"{pending}\n" + "\n".join(described) + "\n" + site.log_lines_about(*pending, *(pk for pk, _ in runs))
            )
        await asyncio.sleep(0.25)
    return [task.result() for task in tasks.values()]


def run_error_codes(session_ids: list[str]) -> dict[str, str]:
    """The error code each failed run recorded, by session."""
    failed = Run.objects.filter(session_id__in=session_ids, status="failed").exclude(error_code="")
    return {str(session): code for session, code in failed.values_list("session_id", "error_code")}


async def check_clients(results: list[tuple[str, ChatResult]], cleared_at: float, codes: dict[str, str]) -> None:
    ends = await sync_to_async(run_ends)([session_id for session_id, _ in results])
    for session_id, result in results:
        if result.status != 200:  # refused before the first byte: a typed JSON error, never a page
            assert result.status in (429, 503), (session_id, result.status, result.body[:300])
            assert json.loads(result.body)["code"], result.body
            continue
        assert result.done, f"{session_id}: the stream did not end with [DONE]: {result.body[-300:]!r}"
        assert result.finished or result.errors, f"{session_id}: neither the answer nor an error"
        deadline = max(cleared_at, ends.get(session_id, cleared_at)) + 5
        assert result.ended_at <= deadline, f"{session_id} ended {result.ended_at - deadline + 5:.1f} s late"
        if result.errors:  # typed: a broken stream's error names its code; a failed run recorded its own
            assert session_id in codes or all(":" in error for error in result.errors), result.errors


async def check_runs(session_ids: list[str], cleared_at: float, site: Topology) -> list[tuple[str, int]]:
    """No run stuck past twice the lease after ``cleared_at``: each is then finished, or running
    under a live lease (a worker is on it), and every run finishes; no message stored twice. The
    runs' final status and attempt."""

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
    return await sync_to_async(
        lambda: list(Run.objects.filter(session_id__in=session_ids).values_list("status", "attempt"))
    )()


async def check_fault(
    site: Topology, token: str, fault: str, tasks: Chats, cleared_at: float, *, memory: bool = False
) -> list[tuple[str, ChatResult]]:
    """Every check after a fault: the clients (:func:`settle`, :func:`check_clients`), the runs
    (:func:`check_runs`), the processes and, with ``memory``, the web processes' memory
    (:func:`check_memory_flat`); the fault's row goes into the suite's table. The clients' results."""
    results = await settle(tasks, cleared_at, site)
    runs = await check_runs([session_id for session_id, _ in results], cleared_at, site)
    codes = await sync_to_async(run_error_codes)([session_id for session_id, _ in results])
    await check_clients(results, cleared_at, codes)
    site.check_alive()
    growth = await check_memory_flat(site, token, *await sync_to_async(burst_session)(list(tasks))) if memory else ""
    report.record(fault, results, cleared_at, runs, growth, codes)
    return results


async def still_answers(site: Topology, token: str) -> None:
    """After the fault, a new chat on each web process gets its answer."""
    for port in site.ports:
        _, result = await chat(port, token, "Still there?")
        assert result.finished, result.body[-500:]


def persistence(site: Topology) -> str:
    return "appendfsync always" if site.redis.persistence else "no persistence"


async def crash_redis_under_load(site: Topology, token: str, down: float, *, memory: bool = False) -> None:
    """Kill Redis while clients stream, start it again ``down`` seconds later, and check every
    client, every run and every process."""
    tasks = await many_chats(site, token)
    await asyncio.to_thread(site.redis.restart, down)
    fault = f"Redis killed mid-run ({persistence(site)}), back after {down:g} s"
    await check_fault(site, token, fault, tasks, time.monotonic(), memory=memory)


async def test_redis_crashes_mid_run_and_comes_back_after_3_s(topology: Topology, token: str) -> None:
    await crash_redis_under_load(topology, token, 3.0, memory=True)


async def test_five_redis_restarts_under_load_leave_every_worker_alive(topology: Topology, token: str) -> None:
    for restart in range(5):
        await crash_redis_under_load(topology, token, 1.0, memory=restart == 4)
    await still_answers(topology, token)


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
    fault = "the database stalls 10 s (the runs' rows locked), a chat posted meanwhile"
    results = await check_fault(topology, token, fault, tasks, time.monotonic(), memory=True)
    for session_id, result in results:
        assert result.finished and not result.errors, (session_id, result.errors)
    attempts = await sync_to_async(
        lambda: list(Run.objects.filter(session_id__in=list(tasks)).values_list("status", "attempt"))
    )()
    assert attempts == [("completed", 1)] * len(tasks), attempts


def lock_the_runs_table(database_url: str, seconds: float) -> None:
    """The database stalls for everything that touches runs: no run can be read, written or
    inserted (by a worker, the reaper, a POST or a resume) for ``seconds``."""
    import psycopg

    with psycopg.connect(database_url) as connection, connection.transaction():
        connection.execute("LOCK TABLE helix_chat_run IN ACCESS EXCLUSIVE MODE")
        time.sleep(seconds)


@pytest.mark.parametrize("topology", [False], ids=["in-memory"], indirect=True)  # a database fault
async def test_a_database_stall_past_its_timeouts_fails_runs_in_plain_words(topology: Topology, token: str) -> None:
    """The database stalls longer than its statement timeout while runs stream. A run whose step
    could not be saved fails ``database_unavailable`` with plain words for the user (never the
    driver's text), recorded before its stream says so, and no answer follows that ``error``; a
    chat posted and a stream resumed during the stall get a typed 503 and store nothing; no
    worker dies, no run stays open, and chats are answered once the database is back."""
    tasks = await many_chats(topology, token, count=8)
    stall = asyncio.ensure_future(
        asyncio.to_thread(lock_the_runs_table, topology.env["DATABASE_URL"], STATEMENT_TIMEOUT + 4.0)
    )
    await asyncio.sleep(1.0)
    late = str(uuid.uuid4())
    tasks[late] = asyncio.ensure_future(chat(topology.ports[0], token, "Asked during the stall", session_id=late))
    resumed = asyncio.ensure_future(
        request(topology.ports[1], "GET", f"/api/chat/{next(iter(tasks))}/stream", token=token)
    )
    await stall
    fault = f"the database stalls {STATEMENT_TIMEOUT + 4} s, past its {STATEMENT_TIMEOUT} s statement timeout"
    results = dict(
        await check_fault(topology, token, fault + ", a chat posted meanwhile", tasks, time.monotonic(), memory=True)
    )
    for response in (results.pop(late), await resumed):
        assert response.status == 503 and json.loads(response.body)["code"] == "DATABASE_UNAVAILABLE", response.body
    assert not await sync_to_async(ChatSession.objects.filter(pk=late).exists)()
    runs = await sync_to_async(
        lambda: {
            str(session): (status, code, text)
            for session, status, code, text in Run.objects.filter(session_id__in=list(results)).values_list(
                "session_id", "status", "error_code", "error_message"
            )
        }
    )()
    failed = [session_id for session_id, (status, _, _) in runs.items() if status == "failed"]
    assert failed, f"no run was writing during a stall past the timeout: {runs}"
    for session_id, result in results.items():
        status, code, text = runs[session_id]
        if session_id not in failed:
            assert (status, result.finished, result.errors) == ("completed", True, []), (session_id, result.errors)
            continue
        assert (code, text) == ("database_unavailable", DATABASE_UNAVAILABLE_TEXT), runs[session_id]
        assert result.errors == [DATABASE_UNAVAILABLE_TEXT], result.errors  # the user's words, not the driver's
        after = [e["type"] for e in result.events[[e.get("type") for e in result.events].index("error") + 1 :]]
        assert not {"text-start", "text-delta", "reasoning-delta", "tool-input-available"} & set(after), after
    await still_answers(topology, token)


def burst_session(session_ids: list[str]) -> tuple[str, bool]:
    """The session the memory check reads after a fault: one whose run completed when there is
    one (its resume answers 204), else any left (its failed stream answers 410); and whether its
    run failed."""
    completed = Run.objects.filter(session_id__in=session_ids, status="completed").values_list("session_id", flat=True)
    for session_id in completed[:1]:
        return str(session_id), False
    kept = ChatSession.objects.filter(pk__in=session_ids).values_list("pk", flat=True)
    return str(kept[0]), True


#: At most this many bursts of 1,000 requests warm the web processes before their memory is checked.
WARM_BURSTS = 8


async def check_memory_flat(
    site: Topology, token: str, session_id: str, failed: bool = False, requests: int = 3000
) -> str:
    """Each web process still answers, and its memory stays flat over ``requests`` more requests
    (resumes of an ended stream and reads of its messages): a fault that broke something inside
    Daphne would show as growth per request. A ``failed`` run's stream answers its typed 410.
    The growth, per process."""
    answers = {200, 204, 410} if failed else {200, 204}

    async def burst(count: int) -> None:
        paths = [f"/api/chat/{session_id}/stream", f"/api/chat/{session_id}/messages"]
        semaphore = asyncio.Semaphore(20)

        async def one(i: int) -> None:
            async with semaphore:
                result = await request(site.ports[i % len(site.ports)], "GET", paths[i % 2], token=token)
                assert result.status in answers, (result.status, result.body[:300])
                assert result.status != 410 or b"STREAM_FAILED" in result.body, result.body[:300]

        await asyncio.gather(*(one(i) for i in range(count)))

    pids = {process.pid for _, process in site.daphnes}
    await burst(200 if pids <= site.warmed else 1000)  # warm a new process: caches, pools, arenas
    site.warmed |= pids
    # A process's memory grows over its first few thousand requests and then levels off (measured
    # alone, a process reading messages grew 8, 3 and 2 MiB over its first bursts of 1,500, then
    # under 0.3 MiB a burst), and here each process serves one of the two paths, so it gets there
    # late: warm until a burst no longer grows them, so that the check below sees growth per
    # request, not the warming up.
    for _ in range(WARM_BURSTS):
        start = site.daphne_rss_kib()
        await burst(1000)
        if all(after - kib < 1024 for kib, after in zip(start, site.daphne_rss_kib(), strict=True)):
            break
    before = site.daphne_rss_kib()
    await burst(requests)
    grown = [after - start for start, after in zip(before, site.daphne_rss_kib(), strict=True)]
    assert all(kib < 4096 for kib in grown), f"web processes grew {grown} KiB over {requests} requests"
    return " / ".join(f"{kib / 1024:+.1f} MiB" for kib in grown)


@pytest.mark.parametrize("topology", [False], ids=["in-memory"], indirect=True)
async def test_a_session_deleted_while_it_streams_ends_its_clients(topology: Topology, token: str) -> None:
    """Deleting sessions mid-run, through the API or through the ORM in another process of the
    site (the admin, a retention job, a host site's own code), ends their clients with a typed
    error or the answer, never a hang; the other sessions are not disturbed; nothing breaks inside
    the web processes, whose memory stays flat."""
    tasks = await many_chats(topology, token, count=8)
    doomed = list(tasks)[:4]
    for session_id in doomed[:2]:
        deleted = await request(topology.ports[1], "DELETE", f"/api/chat/{session_id}", token=token)
        assert deleted.status == 204, deleted.body
    await asyncio.to_thread(
        topology.manage,
        "shell",
        "-c",
        f"from chat.models import ChatSession; ChatSession.objects.filter(pk__in={doomed[2:]!r}).delete()",
    )
    fault = "4 of 8 sessions deleted while they stream (2 by the API, 2 by the ORM)"
    results = await check_fault(topology, token, fault, tasks, time.monotonic(), memory=True)
    for session_id, result in results:
        if session_id not in doomed:
            assert result.finished and not result.errors, (session_id, result.errors)


@pytest.mark.parametrize("topology", [False], ids=["in-memory"], indirect=True)
@pytest.mark.parametrize("away", [True, False], ids=["down", "full"])
async def test_redis_down_or_full_past_the_retry_window_ends_every_client(
    topology: Topology, token: str, away: bool
) -> None:
    """Redis down, or full, for longer than the retry window (15 s against 10 s here; the 30 s
    default behaves the same, 20 s later). Down: connected clients end with a typed error
    instead of hanging and their runs fail. Full: the writers wait for room and the runs carry
    on. Either way no run stays open, the workers are alive, and a new chat is answered after."""
    tasks = await many_chats(topology, token, count=8)
    seconds = RETRY_WINDOW + 5.0
    if away:
        await asyncio.to_thread(topology.redis.restart, seconds)
    else:
        await asyncio.to_thread(topology.redis.fill_up)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(topology.redis.unlimit)
    fault = f"Redis {'down' if away else 'full'} {seconds:g} s (past the {RETRY_WINDOW} s retry window)"
    await check_fault(topology, token, fault, tasks, time.monotonic(), memory=True)
    await still_answers(topology, token)


@pytest.mark.parametrize("topology", [False], ids=["in-memory"], indirect=True)
async def test_redis_full_refuses_chats_typed_and_wedges_nothing(topology: Topology, token: str) -> None:
    """Redis full (``maxmemory``, no eviction) for 5 s: streams in flight end with a typed error
    (or their answer), chats posted meanwhile are refused with a typed 503 or fail typed, no run
    stays queued or running, no worker dies, and chats are answered once there is room again."""
    tasks = await many_chats(topology, token, count=8)
    await asyncio.to_thread(topology.redis.fill_up)
    await asyncio.sleep(1.0)
    for i in range(4):
        late = str(uuid.uuid4())
        tasks[late] = asyncio.ensure_future(chat(topology.ports[i % 2], token, "Asked while full", session_id=late))
    await asyncio.sleep(4.0)
    await asyncio.to_thread(topology.redis.unlimit)
    fault = "Redis full (maxmemory, noeviction) for 5 s, 4 chats posted meanwhile"
    await check_fault(topology, token, fault, tasks, time.monotonic(), memory=True)
    await still_answers(topology, token)


@pytest.mark.parametrize("topology", [False], ids=["in-memory"], indirect=True)
async def test_a_100_mb_upload_is_refused_while_it_arrives_and_costs_nothing(topology: Topology, token: str) -> None:
    """An unauthenticated 100 MB chunked upload is refused with a typed 413 long before its end,
    before any view (or authentication) runs, and the web process does not keep it; one that
    declares 100 MB is refused before it sends any."""
    port, pid = topology.daphnes[0][0], topology.daphnes[0][1].pid
    before = rss_kib(pid)
    sent = await refuses_100_mb_uploads(port)
    grown = rss_kib(pid) - before
    assert grown < 8 * 1024, f"Daphne grew {grown} KiB for refused uploads"
    report.ROWS.append(
        report.FaultRow(
            "an unauthenticated 100 MB chunked upload",
            1,
            0,
            "1 HTTP 413 PAYLOAD_TOO_LARGE",
            None,
            f"refused after {sent * 64} KiB of 102,400",
            f"{grown / 1024:+.1f} MiB (for the upload)",
        )
    )


@pytest.mark.parametrize("topology", [False], ids=["in-memory"], indirect=True)
async def test_a_connection_that_sends_its_headers_a_byte_at_a_time_is_dropped(topology: Topology, token: str) -> None:
    """Slow headers (a byte every half second, which restarts Twisted's idle timeout every time)
    lose the connection at the header deadline (3 s here), while the server goes on answering."""
    port = topology.ports[0]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    opened = time.monotonic()
    head = f"GET /api/agents HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: {'z' * 100}\r\n\r\n".encode()
    dropped_at = None
    for byte in head:
        try:
            writer.write(bytes([byte]))
            await writer.drain()
            if await asyncio.wait_for(reader.read(1), 0.5) == b"":
                dropped_at = time.monotonic() - opened
                break
        except TimeoutError:
            continue
        except OSError:
            dropped_at = time.monotonic() - opened
            break
    writer.close()
    assert dropped_at is not None and dropped_at < 3 + 2, f"a slow-header connection was kept {dropped_at}"
    result = await request(port, "GET", "/api/agents", token=token)
    assert result.status == 200, result.body[:300]
    report.ROWS.append(
        report.FaultRow(
            "a client sending its headers a byte every 0.5 s",
            1,
            0,
            "connection dropped",
            None,
            f"dropped after {dropped_at:.1f} s (deadline 3 s)",
            "not measured",
        )
    )


async def _long_stream(site: Topology, token: str, chunks: int, size: int) -> str:
    """A finished session of the token's user whose stream holds ``chunks`` text deltas of
    ``size`` bytes: a long answer for slow clients to resume."""
    from streams.backends.redis import RedisStreamManager

    def record() -> tuple[str, str]:
        user = Token.objects.get(key=token).user
        session = ChatSession.objects.create(agent="chat", owner=user)
        run = Run.objects.create(session=session, agent="chat", status="completed", message_id="m-long")
        return str(session.pk), str(run.pk)

    session_id, run_id = await sync_to_async(record)()
    store = RedisStreamManager(site.redis.url)
    writer = await store.create_writer(session_id, run_id, "chat")
    for _ in range(0, chunks, 500):
        await writer.write_many([{"type": "text_delta", "delta": "x" * size} for _ in range(500)])
    await store.end_stream(session_id)
    await store.aclose()
    return session_id


async def _stalled_clients(
    port: int, token: str, session_id: str, count: int
) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """``count`` clients that resume the whole stream and then read nothing (their writers are
    kept: one garbage-collected closes its connection). Each has a small socket receive buffer,
    as a phone on a poor network does, so it stalls at once rather than after its kernel took
    megabytes on loopback."""
    clients = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=16 * 1024)
        writer.write(
            f"GET /api/chat/{session_id}/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Token {token}\r\nLast-Event-ID: 0\r\n\r\n".encode()
        )
        await writer.drain()
        clients.append((reader, writer))
    return clients


@pytest.mark.parametrize("topology", [False], ids=["in-memory"], indirect=True)
async def test_clients_that_stop_reading_hold_little_and_are_dropped(topology: Topology, token: str) -> None:
    """Clients that resume a 20 MB answer and read nothing: each added one makes the web process
    hold well under 1 MiB (2.7 MB before the bound), every one is dropped before the end once it
    has read nothing for the slow-client timeout (10 s here), and memory is flat after."""
    session_id = await _long_stream(topology, token, 20_000, 1000)
    port, process = topology.daphnes[0]
    opened_at = time.monotonic()
    first = await _stalled_clients(port, token, session_id, 100)
    await asyncio.sleep(3.0)  # each has filled its socket and Daphne's buffer
    with_100 = rss_kib(process.pid)
    second = await _stalled_clients(port, token, session_id, 100)
    await asyncio.sleep(3.0)
    per_client = (rss_kib(process.pid) - with_100) / 100
    assert per_client < 1024, f"each stalled client holds {per_client:.0f} KiB"
    # Wait for the server to drop them all (reading one first would unstall it): each drop is logged.
    deadline = time.monotonic() + 40
    while topology.log_text().count("client stopped reading") < 200 and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    dropped_at = time.monotonic() - opened_at
    outcomes = []
    for reader, writer in first + second:  # dropped: the connection closed before the end (or reset)
        try:
            body = await asyncio.wait_for(reader.read(), 5)
            outcomes.append(("eof", len(body), body.endswith(b"data: [DONE]\n\n")))
        except ConnectionResetError:
            outcomes.append(("reset", 0, False))
        except TimeoutError:
            outcomes.append(("open", 0, False))
        writer.close()
    kept = [i for i, (how, _, done) in enumerate(outcomes) if how == "open" or done]
    assert not kept, f"stalled clients kept open or to the end: {kept}"
    growth = await check_memory_flat(topology, token, session_id)
    report.ROWS.append(
        report.FaultRow(
            "200 SSE clients resume a 20 MB answer and stop reading",
            200,
            0,
            f"all dropped before the end, the last {dropped_at:.0f} s after the first opened (timeout 10 s)",
            None,
            f"{per_client:.0f} KiB held per added client",
            growth,
        )
    )


@pytest.mark.parametrize("topology", [False], ids=["in-memory"], indirect=True)
async def test_resume_positions_mean_what_they_say_across_web_processes(topology: Topology, token: str) -> None:
    """A client that dropped mid-answer and comes back, to the other web process, after the run
    ended gets the rest and the end; one that has everything gets 204; a position past the end
    of a live run is a typed 400, never a ``finish`` over part of the answer."""
    first, second = topology.ports
    session_id, live = await chat(first, token, "Tell me a story")
    assert live.finished, live.body[-300:]
    middle, last = live.ids[len(live.ids) // 2], live.ids[-1]
    path = f"/api/chat/{session_id}/stream"
    resumed = await request(second, "GET", path, token=token, headers={"Last-Event-ID": str(middle)})
    assert resumed.status == 200 and resumed.finished and resumed.done, resumed.body[-300:]
    assert resumed.text == live.text  # the answer so far replayed, then the rest
    complete = await request(second, "GET", path, token=token, headers={"Last-Event-ID": str(last)})
    assert complete.status == 204
    busy = str(uuid.uuid4())
    running = asyncio.ensure_future(chat(first, token, "A long question", agent="research", session_id=busy))
    await asyncio.sleep(1.5)
    for header in ("Last-Event-ID", "X-Resume-From-Sequence"):
        past = await request(second, "GET", f"/api/chat/{busy}/stream", token=token, headers={header: "100000"})
        assert (past.status, json.loads(past.body)["code"]) == (400, "VALIDATION_ERROR"), past.body
    _, result = await running
    assert result.finished
    report.ROWS.append(
        report.FaultRow(
            "a client resumes after its run ended, on the other web process; a position past the end",
            3,
            2,
            "HTTP 400 VALIDATION_ERROR for the position past the end",
            None,
            "the rest and the end; 204 once it has everything",
        )
    )


@pytest.mark.parametrize("topology", [False], ids=["in-memory"], indirect=True)
async def test_bad_input_is_a_typed_400_under_daphne_and_stores_nothing(topology: Topology, token: str) -> None:
    """Input that used to answer an HTML 500 or poison a session: a typed 400, nothing stored."""
    port = topology.ports[0]
    bodies = [
        b"[" * 10_000 + b"]" * 10_000,  # nested 10,000 deep
        b'{"message": "hi \\ud800"}',  # an unpaired surrogate
        b'{"message": "hi", "state": ' + b'{"a": ' * 900 + b"1" + b"}" * 901,  # state 900 deep
        b'{"message": "hi", "state": {"n": NaN}}',
        b'{"message": "hi", "state": {"n": 1e400}}',
    ]
    session_ids = []
    for raw in bodies:
        session_ids.append(session_id := str(uuid.uuid4()))
        result = await request(port, "POST", f"/api/chat/{session_id}", token=token, raw=raw)
        assert (result.status, json.loads(result.body)["code"]) == (400, "VALIDATION_ERROR"), result.body[:300]
    stored = await sync_to_async(lambda: ChatSession.objects.filter(pk__in=session_ids).count())()
    assert stored == 0
    answered, _ = await chat(port, token, "Hello")
    paging = await request(port, "GET", f"/api/chat/{answered}/messages?offset={10**23}", token=token)
    assert (paging.status, json.loads(paging.body)["code"]) == (400, "VALIDATION_ERROR"), paging.body
    report.ROWS.append(
        report.FaultRow(
            "bad input: JSON 10,000 deep, a lone surrogate, state 900 deep, NaN and 1e400 in state, offset 10^23",
            6,
            0,
            "6 HTTP 400 VALIDATION_ERROR",
            None,
            "nothing stored",
        )
    )


async def _follow(port: int, token: str, session_id: str) -> ChatResult:
    """A client of web process ``port``: chat, and after a broken connection resume from the
    last event id it saw, as the AI SDK does, until the answer ends; the last response. A POST
    that broke before any answer, in a session the server does not know, never arrived (the
    process died before it read it): the client sends it again, as its user would."""
    _, result = await chat(port, token, "Tell me a story", session_id=session_id)
    deadline = time.monotonic() + 30
    while not result.done and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        headers = {"Last-Event-ID": str(result.ids[-1])} if result.ids else {}
        resumed = await request(port, "GET", f"/api/chat/{session_id}/stream", token=token, headers=headers)
        if resumed.status == 204 and result.status == 0:
            _, result = await chat(port, token, "Tell me a story", session_id=session_id)
        elif resumed.status == 204:
            break  # it had everything
        if resumed.status == 200:
            result = resumed
    return result


@pytest.mark.parametrize("topology", [False], ids=["in-memory"], indirect=True)
async def test_a_web_process_killed_while_it_streams_loses_and_doubles_nothing(topology: Topology, token: str) -> None:
    """SIGKILL the web process 20 clients stream from and start it again 1.5 s later: each
    client resumes from its last event id and ends with the whole answer, as stored."""
    port = topology.ports[0]
    session_ids = [str(uuid.uuid4()) for _ in range(20)]
    clients = [asyncio.ensure_future(_follow(port, token, session_id)) for session_id in session_ids]
    await asyncio.sleep(1.0)
    await asyncio.to_thread(topology.restart_daphne, 0, 1.5)
    cleared_at = time.monotonic()
    results = await asyncio.gather(*clients)
    stored = await sync_to_async(
        lambda: dict(
            Message.objects.filter(session_id__in=session_ids, role="assistant").values_list("session_id", "content")
        )
    )()
    for session_id, result in zip(session_ids, results, strict=True):
        assert result.finished and result.done, (session_id, result.body[-300:])
        assert result.text == stored[session_id], session_id  # nothing lost, nothing doubled
    runs = await check_runs(session_ids, cleared_at, topology)
    topology.check_alive()
    fault = "the web process of 20 streaming clients killed, back after 1.5 s (clients resume)"
    report.record(fault, list(zip(session_ids, results, strict=True)), cleared_at, runs)
