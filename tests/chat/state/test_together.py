"""The database calls of one moment, together (chat.state.db.together): one hop to a database
thread for the calls of a turn of the event loop, each with its own result and error, and the
runs of a storm's resumes read in one query whatever callers they belong to."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import Any

import django.db
import pytest
from django.contrib.auth.models import User
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token

from chat.models import ChatSession, Run
from chat.state import db as db_module
from chat.state.db import MOST_PER_HOP, ReadAhead, together
from chat.state.reads import current_run_and_owner, read_current_runs_ahead
from tests.chat.http.test_resume_hop import owner_with_token, prepared
from workers.exceptions import DatabaseUnavailableError

pytestmark = pytest.mark.django_db(transaction=True)  # the calls run on database threads


def counted_reads(log: list[list[Any]], read: Callable[[list[Any]], None] | None = None) -> Callable[[list[Any]], None]:
    """A read ahead that records the keys of each hop (and its queries' count after them)."""

    def read_ahead(keys: list[Any]) -> None:
        with CaptureQueriesContext(connection) as queries:
            if read is not None:
                read(keys)
        log.append([*keys, len(queries)])

    return read_ahead


async def test_the_calls_of_one_turn_share_a_hop_and_keep_their_own_results_and_errors() -> None:
    hops: list[list[Any]] = []
    ahead = counted_reads(hops)

    def work(n: int) -> tuple[int, int]:
        if n == 3:
            raise ValueError("three")
        return n, threading.get_ident()

    calls = [together(functools.partial(work, n), ReadAhead(ahead, n)) for n in range(6)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[3], ValueError) and str(results[3]) == "three"
    answers = [r for r in results if not isinstance(r, BaseException)]
    assert [n for n, _ in answers] == [0, 1, 2, 4, 5]
    assert len({thread for _, thread in answers}) == 1 and answers[0][1] != threading.get_ident()
    assert hops == [[0, 1, 2, 3, 4, 5, 0]]  # one hop, every key read ahead at once


async def test_a_call_that_raises_stop_iteration_fails_alone_and_strands_no_one() -> None:
    """A future refuses StopIteration: raised in a call (a bug, or a library's), it reaches that
    call's caller as a RuntimeError, and the other callers of the hop get their results."""

    def work(n: int) -> int:
        if n == 1:
            next(iter(()))
        return n

    calls = [together(functools.partial(work, n)) for n in range(3)]
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)
    assert results[0] == 0 and results[2] == 2
    assert isinstance(results[1], RuntimeError) and isinstance(results[1].__cause__, StopIteration)


async def test_a_hop_runs_at_most_its_limit_and_the_rest_go_in_the_next() -> None:
    hops: list[list[Any]] = []
    ahead = counted_reads(hops)
    total = MOST_PER_HOP + 3
    results = await asyncio.gather(*(together(functools.partial(int, n), ReadAhead(ahead, n)) for n in range(total)))
    assert results == list(range(total))
    assert sorted(len(keys) - 1 for keys in hops) == [3, MOST_PER_HOP]


async def test_a_database_failure_is_the_typed_error_of_the_calls_it_touches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db_module, "CONNECT_PATIENCE", 0.0)
    ran: list[str] = []

    def down() -> None:
        raise OperationalError("server closed the connection unexpectedly")

    def stalled_read_ahead(keys: list[Any]) -> None:
        raise OperationalError("canceling statement due to statement timeout")

    def broken_read_ahead(keys: list[Any]) -> None:
        raise ValueError("a bug in the read ahead")

    def work(name: str) -> str:
        ran.append(name)
        return name

    outcomes = await asyncio.gather(
        together(down),
        together(functools.partial(work, "stalled"), ReadAhead(stalled_read_ahead, 1)),
        together(functools.partial(work, "stalled too"), ReadAhead(stalled_read_ahead, 2)),
        together(functools.partial(work, "broken"), ReadAhead(broken_read_ahead, 1)),
        together(functools.partial(work, "broken too"), ReadAhead(broken_read_ahead, 2)),
        together(functools.partial(work, "plain")),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], DatabaseUnavailableError)
    # A read ahead the database failed fails the calls that wanted it, without their waiting for
    # the same stall again; one that failed otherwise leaves each call to read for itself.
    assert isinstance(outcomes[1], DatabaseUnavailableError) and isinstance(outcomes[2], DatabaseUnavailableError)
    assert list(outcomes[3:]) == ["broken", "broken too", "plain"] and ran == ["broken", "broken too", "plain"]


async def test_a_hop_checks_its_connection_around_the_hop_and_after_a_failed_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checks: list[str] = []
    real_check = django.db.close_old_connections

    def check() -> None:
        checks.append("check")
        real_check()

    def fails() -> None:
        checks.append("fails")
        raise ValueError("a call's own error")

    def work(n: int) -> int:
        checks.append(f"call {n}")
        return n

    monkeypatch.setattr(db_module, "close_old_connections", check)
    calls = [functools.partial(work, n) for n in range(8)]
    assert await asyncio.gather(*(together(call) for call in calls)) == list(range(8))
    # Eight calls, one check before the hop and one after: not two per call.
    assert checks == ["check", *(f"call {n}" for n in range(8)), "check"]

    checks.clear()
    outcomes = await asyncio.gather(
        together(functools.partial(work, 0)),
        together(fails),
        together(functools.partial(work, 1)),
        return_exceptions=True,
    )
    assert outcomes[0] == 0 and isinstance(outcomes[1], ValueError) and outcomes[2] == 1
    assert checks == ["check", "call 0", "fails", "check", "call 1", "check"]


async def test_the_calls_after_a_failed_call_fail_when_the_database_is_then_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[int] = []
    gone = threading.Event()
    real_connect = db_module._connect

    def connect() -> None:
        if gone.is_set():
            raise OperationalError("connection refused")
        real_connect()

    def dies() -> None:
        gone.set()
        raise OperationalError("server closed the connection unexpectedly")

    def work(n: int) -> int:
        ran.append(n)
        return n

    monkeypatch.setattr(db_module, "_connect", connect)
    outcomes = await asyncio.gather(
        together(functools.partial(work, 0)),
        together(dies),
        together(functools.partial(work, 1)),
        together(functools.partial(work, 2)),
        return_exceptions=True,
    )
    # The call that ran keeps its result; the rest fail at once with the database's error
    # instead of each waiting for it again, and none of them ran.
    assert outcomes[0] == 0 and ran == [0]
    assert all(isinstance(outcome, DatabaseUnavailableError) for outcome in outcomes[1:])


async def test_the_runs_of_a_hops_resumes_are_read_in_one_query_and_each_call_reads_none() -> None:
    def fixtures() -> list[str]:
        owner = User.objects.create_user("owner", password="pw")
        other = User.objects.create_user("other", password="pw")
        busy = ChatSession.objects.create(owner=owner, agent="chat")
        Run.objects.create(session=busy, agent="chat", status="completed", message_id="m-1")
        Run.objects.create(session=busy, agent="chat", status="running", message_id="m-2", start_sequence=7)
        theirs = ChatSession.objects.create(owner=other, agent="chat")
        Run.objects.create(session=theirs, agent="chat", status="completed", message_id="m-3")
        idle = ChatSession.objects.create(owner=owner, agent="chat")
        return [busy.pk, theirs.pk, idle.pk, "no-such-session"]

    sessions = await db_module.db(fixtures)()
    expected = await asyncio.gather(*(db_module.db(current_run_and_owner)(s) for s in sessions))
    assert expected[0] is not None and expected[0][0].message_id == "m-2" and expected[2] is None

    def read(session_id: str) -> tuple[Any, int]:
        with CaptureQueriesContext(connection) as queries:
            found = current_run_and_owner(session_id)
        return found, len(queries)

    hops: list[list[Any]] = []
    ahead = counted_reads(hops, read_current_runs_ahead)
    found = await asyncio.gather(*(together(functools.partial(read, s), ReadAhead(ahead, s)) for s in sessions))
    assert [f for f, _ in found] == expected
    assert [queries for _, queries in found] == [0, 0, 0, 0]
    assert hops == [[*sessions, 1]]
    outside = await db_module.db(read)(sessions[0])  # outside a hop every read is its own query
    assert outside == (expected[0], 1)


async def test_callers_in_one_hop_are_each_checked_against_the_owner() -> None:
    def fixtures() -> tuple[str, Token, Token]:
        owner, token = owner_with_token("owner")
        _, stranger = owner_with_token("stranger")
        session = ChatSession.objects.create(owner=owner, agent="chat")
        Run.objects.create(session=session, agent="chat", status="running", message_id="m")
        return session.pk, token, stranger

    session_id, token, stranger = await db_module.db(fixtures)()
    hops: list[list[Any]] = []
    ahead = ReadAhead(counted_reads(hops, read_current_runs_ahead), session_id)

    def resume(token: Token) -> tuple[bool, int]:
        with CaptureQueriesContext(connection) as queries:
            view = prepared(session_id, token)
        return view.session_exists and view.latest_run is not None, len(queries)

    calls = [together(functools.partial(resume, t), ahead) for t in (token, stranger, token)]
    owner_first, refused, owner_again = await asyncio.gather(*calls, return_exceptions=True)
    assert refused == (False, 1)  # someone else's session: as one that does not exist (its token read)
    assert owner_first == (True, 2)  # its token, then the run and owner
    assert owner_again == (True, 0)  # the same token's row and the same run's, read once in the hop
    assert hops == []  # one key, however many callers ask: the first read of it is shared instead


async def test_a_key_alone_is_not_read_ahead_and_one_read_ahead_covers_many() -> None:
    hops: list[list[Any]] = []
    ahead = counted_reads(hops)
    await together(functools.partial(int, 1), ReadAhead(ahead, "a"))
    await asyncio.gather(*(together(functools.partial(int, 1), ReadAhead(ahead, "a")) for _ in range(3)))
    assert hops == []
    await asyncio.gather(*(together(functools.partial(int, 1), ReadAhead(ahead, key)) for key in "abba"))
    assert hops == [["a", "b", 0]]


async def test_a_call_reads_ahead_with_several_reads_each_made_once_for_its_hop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(db_module, "CONNECT_PATIENCE", 0.0)
    tokens: list[list[Any]] = []
    runs: list[list[Any]] = []
    token_read, run_read = counted_reads(tokens), counted_reads(runs)

    def stalled(keys: list[Any]) -> None:
        raise OperationalError("canceling statement due to statement timeout")

    outcomes = await asyncio.gather(
        *(
            together(functools.partial(int, n), ReadAhead(token_read, f"t{n % 2}"), ReadAhead(run_read, n))
            for n in range(4)
        ),
        together(functools.partial(int, 9), ReadAhead(run_read, 9), ReadAhead(stalled, 1)),
        together(functools.partial(int, 8), ReadAhead(stalled, 2)),
        return_exceptions=True,
    )
    assert outcomes[:4] == [0, 1, 2, 3]
    # A call fails with any of its reads that the database failed, and only those calls do.
    assert isinstance(outcomes[4], DatabaseUnavailableError) and isinstance(outcomes[5], DatabaseUnavailableError)
    assert tokens == [["t0", "t1", 0]] and runs == [[0, 1, 2, 3, 9, 0]]


class ReplicaReads:
    """A site's router: Helix's models and users are read from a replica, written to default."""

    def db_for_read(self, model: type, **hints: Any) -> str:
        return "replica"

    def db_for_write(self, model: type, **hints: Any) -> str:
        return "default"


def test_the_calls_check_and_open_the_databases_the_sites_routers_name() -> None:
    from django.test import override_settings

    db_module._aliases.cache_clear()
    try:
        assert db_module._aliases() == ("default",)
        db_module._aliases.cache_clear()
        with override_settings(DATABASE_ROUTERS=[f"{__name__}.ReplicaReads"]):
            assert db_module._aliases() == ("replica", "default")
    finally:
        db_module._aliases.cache_clear()
