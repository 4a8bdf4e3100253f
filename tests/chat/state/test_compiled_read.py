"""Hot reads compiled once (chat.state.compiled): the same rows as the ORM, typed as the ORM
types them, and the ORM itself for a query the compiled form cannot take."""

from __future__ import annotations

import datetime
import uuid
from typing import Any, cast

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from chat.models import ChatSession, Run
from chat.state.compiled import CompiledRead, read_ahead, shared_reads
from chat.state.reads import current_run_and_owner, read_current_runs_ahead

pytestmark = pytest.mark.django_db


def test_the_latest_run_and_the_owner_read_as_the_orm_reads_them() -> None:
    owner = User.objects.create_user("owner", password="pw")
    session = ChatSession.objects.create(owner=owner, agent="chat")
    Run.objects.create(session=session, agent="chat", status="completed", message_id="m-1")
    latest = Run.objects.create(
        session=session, agent="chat", status="running", message_id="m-2", start_sequence=41, message_offset=3
    )
    found = current_run_and_owner(session.pk)
    assert found is not None
    run, owner_id = found
    assert (run.run_id, run.status, run.start_sequence, run.message_id, run.message_offset) == (
        str(latest.pk),
        "running",
        41,
        "m-2",
        3,
    )
    assert owner_id == owner.pk and type(owner_id) is type(owner.pk)
    uuid.UUID(run.run_id)  # the run's id as the ORM spells it, whatever the database returned


def test_a_session_without_runs_an_unknown_one_and_a_bad_id_have_none() -> None:
    anonymous = ChatSession.objects.create(owner=None, agent="chat")
    assert current_run_and_owner(anonymous.pk) is None
    Run.objects.create(session=anonymous, agent="chat", status="queued", message_id="m")
    found = current_run_and_owner(anonymous.pk)
    assert found is not None and found[1] is None  # an anonymous visitor's session has no owner
    assert current_run_and_owner(str(uuid.uuid4())) is None
    assert current_run_and_owner("x" * 500) is None


def test_a_read_whose_compiled_form_takes_other_parameters_runs_through_the_orm(
    django_assert_num_queries: Any,
) -> None:
    session = ChatSession.objects.create(owner=None, agent="chat")
    Run.objects.create(session=session, agent="chat", status="running", message_id="m")
    read = CompiledRead(
        Run,
        lambda key: Run.objects.filter(session_id=key, status="running").values_list("message_id"),
    )
    with django_assert_num_queries(2):
        assert read.rows(session.pk) == [("m",)]
        assert read.rows(session.pk) == [("m",)]
    assert read.rows("no-such-session") == []


def test_values_come_back_through_the_converters_the_orm_applies() -> None:
    """Datetimes aware (SQLite returns text), UUIDs as UUIDs, JSON decoded: as the ORM reads them."""
    session = ChatSession.objects.create(owner=None, agent="chat")
    run = Run.objects.create(session=session, agent="chat", status="running", message_id="m", usage={"tokens": 3})
    columns = ("id", "created_at", "lease_expires_at", "usage", "input")
    read = CompiledRead(Run, lambda key: Run.objects.filter(message_id=key).values_list(*columns))
    [row] = read.rows("m")
    [expected] = Run.objects.filter(pk=run.pk).values_list(*columns)
    assert row == tuple(expected)
    assert [type(item) for item in row] == [type(item) for item in expected]
    assert row[1].tzinfo is not None and row[3] == {"tokens": 3}


def test_a_read_by_a_column_the_probe_is_no_value_of_runs_through_the_orm() -> None:
    session = ChatSession.objects.create(owner=None, agent="chat")
    run = Run.objects.create(session=session, agent="chat", status="running", message_id="m")
    read = CompiledRead(Run, lambda key: Run.objects.filter(pk=key).values_list("status"))  # a UUID column
    assert read.rows(str(run.pk)) == [("running",)]
    assert read.rows(str(uuid.uuid4())) == []


def test_a_read_ahead_remembers_rows_only_for_the_keys_they_came_back_with() -> None:
    class Many:
        """Rows as a query by several keys returns them: each begins with its key."""

        def __init__(self, rows: list[tuple[Any, ...]]) -> None:
            self.back, self.asked = rows, list[tuple[str, ...]]()

        def rows(self, *keys: str) -> list[tuple[Any, ...]]:
            self.asked.append(keys)
            return self.back

    class One:
        def __init__(self) -> None:
            self.remembered: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}

        def remember(self, rows: list[tuple[Any, ...]], *values: str) -> None:
            self.remembered[values] = rows

    # "B" came back for "b": a database that compares more loosely than Python (a collation).
    many = Many([("a", 1), ("a", 2), ("a", 3), ("B", 4), ("x", 5)])
    cases = [(True, {("a",): [(1,), (2,)], ("b",): [], ("c",): []}), (False, {("a",): [(1,), (2,)]})]
    for exact, remembered in cases:
        one = One()
        read_ahead(cast(Any, one), cast(Any, many), ["a", "b", "c", "a"], per_query=64, most=2, exact=exact)
        # At most two rows a key, none for another key's row; without exact keys, "b" and "c"
        # are left to their own reads.
        assert one.remembered == remembered, exact
    assert many.asked == [("a", "b", "c", "c")] * 2  # padded with its last key to a power of two


def test_a_hops_read_ahead_finds_each_sessions_latest_run_among_many(django_assert_num_queries: Any) -> None:
    """The latest by creation, whatever order the runs were stored in, for sessions with many runs,
    one run and none, in one query for them all: the run each session's own read finds."""
    owner = User.objects.create_user("owner", password="pw")
    long_chat, short_chat, empty = (ChatSession.objects.create(owner=owner, agent="chat") for _ in range(3))
    start = timezone.now() - datetime.timedelta(days=1)
    # Minutes after ``start`` each run was created, in the order they are stored: the latest (53)
    # is the third stored, the last stored the earliest.
    minutes = [7, 2, 53, 0, 13, *range(20, 45), -60]
    for n, minute in enumerate(minutes):
        run = Run.objects.create(session=long_chat, agent="chat", status="completed", message_id=f"long-{n}")
        Run.objects.filter(pk=run.pk).update(created_at=start + datetime.timedelta(minutes=minute))
    Run.objects.create(session=short_chat, agent="chat", status="running", message_id="short")
    sessions = [long_chat.pk, short_chat.pk, empty.pk, "no-such-session"]

    alone = [current_run_and_owner(s) for s in sessions]
    with shared_reads(), django_assert_num_queries(1):
        read_current_runs_ahead(sessions)
        together = [current_run_and_owner(s) for s in sessions]
    assert together == alone
    assert [found[0].message_id if found else None for found in together] == ["long-2", "short", None, None]
    assert together[0] is not None and together[0][1] == owner.pk
