"""Management commands."""

from __future__ import annotations

import uuid
from datetime import timedelta
from io import StringIO

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone
from rest_framework.authtoken.models import Token

from chat.models import ChatSession, Run
from streams.backends import get_stream_manager

pytestmark = pytest.mark.django_db(transaction=True)


def test_create_demo_user() -> None:
    out = StringIO()
    call_command("create_demo_user", "--username", "visitor", "--password", "pw-12345", "--staff", stdout=out)
    user = User.objects.get(username="visitor")
    assert user.check_password("pw-12345") and user.is_staff
    assert Token.objects.get(user=user).key in out.getvalue()
    call_command("create_demo_user", "--username", "visitor", "--password", "other-pw", stdout=StringIO())
    assert User.objects.get(username="visitor").check_password("other-pw")


def test_cleanup_removes_old_idle_sessions_and_their_streams() -> None:
    manager = get_stream_manager()
    old, recent, busy = (ChatSession.objects.create(agent="chat") for _ in range(3))
    for session in (old, recent, busy):
        async_to_sync(manager.create_writer)(str(session.pk), "run")
    Run.objects.create(session=busy, agent="chat", status="running")
    ChatSession.objects.filter(pk__in=[old.pk, busy.pk]).update(updated_at=timezone.now() - timedelta(days=40))
    out = StringIO()
    call_command("cleanup_helix", "--days", "30", "--dry-run", stdout=out)
    assert "Would delete 1 sessions" in out.getvalue() and ChatSession.objects.count() == 3
    call_command("cleanup_helix", "--days", "30", stdout=StringIO())
    assert set(ChatSession.objects.values_list("pk", flat=True)) == {recent.pk, busy.pk}
    assert async_to_sync(manager.get_stream_info)(str(old.pk)) is None
    assert async_to_sync(manager.get_stream_info)(str(recent.pk)) is not None
    assert uuid.UUID(str(recent.pk))


def test_a_session_deleted_any_way_takes_its_stream_once_the_deletion_commits() -> None:
    """The admin, a user's cascade or a host site's own query: the stream goes with the session,
    and only if the deletion commits."""
    from django.db import transaction

    manager = get_stream_manager()
    kept, deleted, owned = (ChatSession.objects.create(agent="chat") for _ in range(3))
    owned.owner = User.objects.create_user(f"leaving-{uuid.uuid4().hex[:8]}")
    owned.save()
    for session in (kept, deleted, owned):
        async_to_sync(manager.create_writer)(str(session.pk), "run")

    with pytest.raises(RuntimeError), transaction.atomic():
        ChatSession.objects.filter(pk=kept.pk).delete()
        raise RuntimeError("rolled back")
    assert async_to_sync(manager.get_stream_info)(str(kept.pk)) is not None

    ChatSession.objects.filter(pk=deleted.pk).delete()
    owned.owner.delete()  # the user's sessions go by cascade, and their streams with them
    for session in (deleted, owned):
        assert async_to_sync(manager.get_stream_info)(str(session.pk)) is None
    assert async_to_sync(manager.get_stream_info)(str(kept.pk)) is not None
