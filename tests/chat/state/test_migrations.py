"""Upgrading a database that holds chats: 0002 turns UUID session ids into strings, keeping every row
and every link to it; 0003 and 0004 index runs by session and creation, keeping the rule of one
active run per session. Each test leaves the database at the latest migrations, as it found it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from chat.models import Run
from chat.state.reads import current_run_and_owner

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("helix_chat", "0001_initial")]
AFTER = [("helix_chat", "0002_session_ids_are_strings")]


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


def latest() -> list[tuple[str, str]]:
    leaves: list[tuple[str, str]] = MigrationExecutor(connection).loader.graph.leaf_nodes()
    return leaves


@pytest.fixture(autouse=True)
def _back_to_the_latest() -> Iterator[None]:
    yield
    migrate(latest())  # the tests after these run on the schema the models describe


def test_session_ids_become_strings_and_keep_their_runs_messages_and_calls() -> None:
    apps = migrate(BEFORE).loader.project_state(BEFORE).apps
    session_id = uuid.uuid4()
    session = apps.get_model("helix_chat", "ChatSession").objects.create(id=session_id, agent="assistant")
    run = apps.get_model("helix_chat", "Run").objects.create(session=session, agent="assistant", status="paused")
    apps.get_model("helix_chat", "Message").objects.create(session=session, run=run, position=0, role="user")
    apps.get_model("helix_chat", "Checkpoint").objects.create(
        run=run, session=session, step=1, message_count=1, stream_sequence=3
    )
    apps.get_model("helix_chat", "PendingCall").objects.create(
        run=run,
        session=session,
        kind="approval",
        tool_call_id="c1",
        tool_name="t",
        expires_at=timezone.now() + timedelta(hours=1),
    )

    apps = migrate(AFTER).loader.project_state(AFTER).apps
    session = apps.get_model("helix_chat", "ChatSession").objects.get(pk=str(session_id))
    assert session.pk == str(session_id)
    for model in ("Run", "Message", "Checkpoint", "PendingCall"):
        assert apps.get_model("helix_chat", model).objects.filter(session_id=str(session_id)).count() == 1, model
    assert apps.get_model("helix_chat", "ChatSession").objects.create(id="session-123", agent="a").pk == "session-123"


def test_runs_indexed_by_session_keep_one_active_run_per_session_and_the_latest_run() -> None:
    apps = migrate(AFTER).loader.project_state(AFTER).apps
    session = apps.get_model("helix_chat", "ChatSession").objects.create(agent="assistant")
    runs = apps.get_model("helix_chat", "Run").objects
    start = timezone.now() - timedelta(hours=1)
    for minute, status in [(3, "completed"), (9, "running"), (1, "completed"), (5, "completed")]:
        run = runs.create(session=session, agent="assistant", status=status, message_id=f"m-{minute}")
        runs.filter(pk=run.pk).update(created_at=start + timedelta(minutes=minute))

    migrate(latest())
    found = current_run_and_owner(session.pk)
    assert found is not None and found[0].message_id == "m-9"
    # The rule that 0003 dropped on PostgreSQL with the session column's own index, made again by 0004.
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(session_id=session.pk, agent="assistant", status="queued", message_id="m-second")
    indexes = connection.introspection.get_constraints(connection.cursor(), "helix_chat_run")
    assert indexes["helix_chat_run_latest"]["columns"] == ["session_id", "created_at"]
