"""A new session belongs to whoever creates it, however two callers race for its id: the owner
is compared with the caller in the transaction that creates or takes the session."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient, override_settings

from chat.models import ChatSession, Message, Run
from chat.state.recorder import DjangoRunRecorder
from streams.messages import StoredMessage
from tests.chat.http.requests import login, post
from workers.exceptions import SessionNotFoundError

pytestmark = pytest.mark.django_db(transaction=True)


def user_message(text: str) -> StoredMessage:
    return StoredMessage(role="user", content=text, id=f"u-{uuid.uuid4().hex[:8]}")


async def start(session_id: str, text: str, owner_id: int | None, caller_owns: bool | None) -> str:
    return await DjangoRunRecorder().start_run(
        session_id,
        "chat",
        user_message=user_message(text),
        start_sequence=0,
        message_id=f"m-{uuid.uuid4().hex[:8]}",
        owner_id=owner_id,
        caller_owns=caller_owns,
    )


async def test_the_loser_of_a_race_for_a_new_id_finds_the_winners_session_and_stores_nothing() -> None:
    """Both callers passed the view's ownership check while the id was free; the recorder is
    where the second one learns whose the session became."""
    alice, bob = (
        await sync_to_async(User.objects.create_user)("alice"),
        await sync_to_async(User.objects.create_user)("bob"),
    )
    session_id = str(uuid.uuid4())
    await start(session_id, "Alice's question", alice.pk, True)
    with pytest.raises(SessionNotFoundError):
        await start(session_id, "Bob's question", bob.pk, True)
    with pytest.raises(SessionNotFoundError):  # an anonymous caller that never had the id
        await start(session_id, "A visitor's question", None, False)
    assert await Run.objects.filter(session_id=session_id).acount() == 1
    contents = [m.content async for m in Message.objects.filter(session_id=session_id)]
    assert contents == ["Alice's question"]


async def test_two_visitors_racing_for_a_new_id_get_one_session_each_or_a_404() -> None:
    session_id = str(uuid.uuid4())
    await start(session_id, "The first visitor's question", None, False)
    with pytest.raises(SessionNotFoundError):  # the second visitor also thought the id was free
        await start(session_id, "The second visitor's question", None, False)
    await Run.objects.filter(session_id=session_id).aupdate(status="completed")
    await start(session_id, "The first visitor again", None, True)  # it owns the id: it may go on
    assert await Message.objects.filter(session_id=session_id).acount() == 2


async def test_the_sites_own_code_may_use_any_session() -> None:
    alice = await sync_to_async(User.objects.create_user)("alice")
    session_id = str(uuid.uuid4())
    await start(session_id, "Alice's question", alice.pk, True)
    await Run.objects.filter(session_id=session_id).aupdate(status="completed")
    await start(session_id, "From the site's own code", None, None)
    assert (await ChatSession.objects.aget(pk=session_id)).owner_id == alice.pk


@pytest.mark.parametrize("attempt", range(3))
async def test_concurrent_posts_of_two_users_to_one_new_id(attempt: int) -> None:
    alice, bob = await login(f"alice{attempt}"), await login(f"bob{attempt}")
    session_id = str(uuid.uuid4())
    answers = await asyncio.gather(
        post(alice, session_id, {"message": "Alice asks"}), post(bob, session_id, {"message": "Bob asks"})
    )
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [200, 404], statuses
    winner = "Alice asks" if answers[0].status_code == 200 else "Bob asks"
    loser = answers[1] if winner == "Alice asks" else answers[0]
    assert loser.json()["code"] == "SESSION_NOT_FOUND"
    for response in answers:
        await sync_to_async(response.close)()
    contents = [m.content async for m in Message.objects.filter(session_id=session_id, role="user")]
    assert contents == [winner]


async def test_concurrent_posts_of_two_visitors_to_one_new_id(settings: Any) -> None:
    session_id = str(uuid.uuid4())
    with override_settings(HELIX={**settings.HELIX, "ALLOW_ANONYMOUS": True}):
        first, second = AsyncClient(), AsyncClient()
        for client in (first, second):  # each has a Django session (its identity) and a CSRF cookie
            await client.get("/api/sessions")
        answers = await asyncio.gather(
            post(first, session_id, {"message": "First"}), post(second, session_id, {"message": "Second"})
        )
        assert sorted(r.status_code for r in answers) == [200, 404]
        loser = second if answers[0].status_code == 200 else first
        for response in answers:
            await sync_to_async(response.close)()
        assert (await loser.get("/api/sessions")).json()["results"] == []  # it never held the id
        assert (await loser.get(f"/api/chat/{session_id}/snapshot")).status_code == 404
