"""The database hop of a resume: who calls, whether they own the session, and the run to stream,
read together (a reconnect storm is thousands of these hops)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from chat.http.authentication import _reads
from chat.http.views import ChatStreamView
from chat.models import ChatSession, Run
from chat.state.compiled import CompiledRead
from chat.state.db import db

pytestmark = pytest.mark.django_db


def prepared(session_id: str, token: Token) -> ChatStreamView:
    """The stream view after its database hop for a GET of ``session_id`` by ``token``'s user."""
    request = APIRequestFactory().get(f"/api/chat/{session_id}/stream", HTTP_AUTHORIZATION=f"Token {token.key}")
    view = ChatStreamView()
    view.args, view.kwargs, view.headers = (), {"session_id": session_id}, {}
    view.request = view.initialize_request(request)
    view._prepare(view.request, session_id=session_id)
    return view


def owner_with_token(name: str) -> tuple[User, Token]:
    user = User.objects.create_user(name, password="pw")
    return user, Token.objects.create(user=user)


def test_the_owner_and_the_run_come_in_the_query_after_the_callers(django_assert_num_queries: Any) -> None:
    owner, token = owner_with_token("owner")
    session = ChatSession.objects.create(owner=owner, agent="chat")
    Run.objects.create(session=session, agent="chat", status="completed", message_id="m-1")
    latest = Run.objects.create(session=session, agent="chat", status="running", message_id="m-2")
    with django_assert_num_queries(2):  # the caller's token, then the session's owner and latest run
        view = prepared(session.pk, token)
    assert view.session_exists and view.latest_run is not None
    assert (view.latest_run.run_id, view.latest_run.message_id) == (str(latest.pk), "m-2")


def test_someone_elses_session_is_as_one_that_does_not_exist_and_its_run_is_not_kept() -> None:
    owner, _ = owner_with_token("owner")
    _, stranger = owner_with_token("stranger")
    session = ChatSession.objects.create(owner=owner, agent="chat")
    Run.objects.create(session=session, agent="chat", status="running", message_id="m")
    bare = ChatSession.objects.create(owner=owner, agent="chat")  # no run: the owner alone decides
    for foreign in (session.pk, bare.pk, "no-such-session"):
        view = prepared(foreign, stranger)
        assert not view.session_exists and view.latest_run is None, foreign


def test_a_session_without_a_run_or_without_a_row_is_told_apart() -> None:
    owner, token = owner_with_token("owner")
    session = ChatSession.objects.create(owner=owner, agent="chat")
    view = prepared(session.pk, token)
    assert view.session_exists and view.latest_run is None
    missing = prepared("no-such-session", token)
    assert not missing.session_exists and missing.latest_run is None


@pytest.mark.django_db(transaction=True)
async def test_a_resume_leaves_nothing_for_the_cyclic_collector() -> None:
    # An open stream lives for minutes: whatever its request leaves in reference cycles waits for
    # the collector, which walks it on every collection until then (thousands in a storm).
    def fixtures() -> tuple[str, str]:
        owner, token = owner_with_token("owner")
        session = ChatSession.objects.create(owner=owner, agent="chat")
        Run.objects.create(session=session, agent="chat", status="completed", message_id="m")
        return session.pk, token.key

    session_id, key = await db(fixtures)()
    view = ChatStreamView.as_view()
    request = APIRequestFactory().get(f"/api/chat/{session_id}/stream", HTTP_AUTHORIZATION=f"Token {key}")
    gc.collect()
    gc.disable()  # no collection may take the cycles before they are looked for
    try:
        response = await view(request, session_id=session_id)
        assert response.status_code == 204  # the run has no stream left: nothing to send
        del response, request
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = sorted({type(o).__name__ for o in gc.garbage if isinstance(o, ChatStreamView | Request | Token | User)})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


@pytest.mark.django_db(transaction=True)
async def test_the_resumes_of_different_people_in_one_hop_read_their_tokens_in_one_query(
    compiled_reads: list[tuple[CompiledRead, int]],
) -> None:
    # A storm's clients are people with tokens of their own: one query for their tokens per hop.
    def fixtures() -> list[tuple[str, str]]:
        clients = []
        for n in range(5):
            owner, token = owner_with_token(f"owner{n}")
            session = ChatSession.objects.create(owner=owner, agent="chat")
            Run.objects.create(session=session, agent="chat", status="completed", message_id=f"m-{n}")
            clients.append((session.pk, token.key))
        return clients

    clients = await db(fixtures)()
    compiled_reads.clear()
    view = ChatStreamView.as_view()
    factory = APIRequestFactory()
    responses = await asyncio.gather(
        *(view(factory.get(f"/api/chat/{s}/stream", HTTP_AUTHORIZATION=f"Token {k}"), session_id=s) for s, k in clients)
    )
    assert [r.status_code for r in responses] == [204] * 5  # each its own, past its owner's check
    tokens = _reads[Token]
    assert [n for read, n in compiled_reads if read is tokens.many] == [8]  # five keys, padded to a power of two
    assert [n for read, n in compiled_reads if read is tokens.read] == []
