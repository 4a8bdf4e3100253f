"""Upgrading a database that holds chats: 0002 turns UUID session ids into strings, keeping every row
and every link to it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("helix_chat", "0001_initial")]
AFTER = [("helix_chat", "0002_session_ids_are_strings")]


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


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
