"""A resume by its session's owner with a token, answered by the stream route without the
pipeline's objects (``chat/http/owner_resume.py``): the same answer as the pipeline's, for the
owner and for everyone the pipeline turns away."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from types import SimpleNamespace
from typing import Any, cast

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, User
from django.core.handlers.asgi import ASGIRequest
from django.test import override_settings
from rest_framework.authtoken.models import Token

from chat.http import owner_resume
from chat.http.asgi import StreamRouter
from chat.http.authentication import TokenAuthentication
from chat.http.pipeline import HelixAPIView
from chat.http.request_headers import HeadersOnly
from chat.models import ChatSession, Run
from chat.state import reads
from chat.state.compiled import CompiledRead, shared_reads
from streams.backends import get_stream_manager
from tests.chat.http.requests import scope
from workers.exceptions import DatabaseUnavailableError

pytestmark = pytest.mark.django_db(transaction=True)


async def refuse(*args: Any) -> None:
    raise AssertionError("a resume must not reach Django")


async def get(path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """A GET through the stream route, read until the stream's first text (or the answer's end):
    its status, headers and body."""
    sent: list[dict[str, Any]] = []
    leave = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    task = asyncio.ensure_future(StreamRouter(refuse)(scope(path, headers=headers), receive, send))
    for _ in range(250):
        body = b"".join(m.get("body", b"") for m in sent[1:])
        if task.done() or b'"delta":"Hello"' in body:
            break
        await asyncio.sleep(0.02)
    leave.set()
    await asyncio.wait_for(task, 5)
    start = sent[0]
    return (
        start["status"],
        {k.decode(): v.decode() for k, v in start["headers"]},
        b"".join(m.get("body", b"") for m in sent[1:]),
    )


def through_the_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(owner_resume, "_VIEWS", ())


@pytest.fixture
def dispatched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests the pipeline answered."""
    paths: list[str] = []
    dispatch = HelixAPIView.dispatch

    async def counted(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        paths.append(request.path)
        return await dispatch(self, request, *args, **kwargs)

    monkeypatch.setattr(HelixAPIView, "dispatch", counted)
    return paths


@pytest.fixture(params=["one query", "two reads"])
def owner_reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The owner's check by one query (``OwnedRuns``), and by the two reads of a site whose
    models or routers cannot take the join."""
    if request.param == "two reads":
        monkeypatch.setattr(owner_resume, "owned_runs", lambda owners: None)
    return str(request.param)


@sync_to_async
def person(name: str, *, active: bool = True) -> tuple[User, str]:
    user = User.objects.create_user(f"{name}-{uuid.uuid4().hex[:6]}", password="pw-owner", is_active=active)
    return user, Token.objects.create(user=user).key


async def session_of(owner: User, *, run: bool = True) -> str:
    session = await sync_to_async(ChatSession.objects.create)(agent="chat", owner=owner)
    if run:
        await sync_to_async(Run.objects.create)(session=session, agent="chat", status="running", message_id="m-1")
        writer = await get_stream_manager().create_writer(str(session.pk), "run-1")
        await writer.write({"type": "text_delta", "delta": "Hello"})
    return str(session.pk)


async def test_the_owners_resume_skips_the_pipeline_and_answers_as_it_does(
    monkeypatch: pytest.MonkeyPatch, dispatched: list[str], owner_reads: str
) -> None:
    owner, token = await person("owner")
    session_id = await session_of(owner)
    auth = {"Authorization": f"Token {token}"}
    for path in (f"/api/chat/{session_id}", f"/api/chat/{session_id}/stream"):
        status, headers, body = await get(path, auth)
        assert dispatched == []  # answered without the pipeline
        assert status == 200 and b'"delta":"Hello"' in body
        with monkeypatch.context() as patch:
            through_the_pipeline(patch)
            assert await get(path, auth) == (status, headers, body)
        assert dispatched == [path]
        dispatched.clear()
    assert headers["Allow"] == "GET, HEAD" and headers["Content-Type"] == "text/event-stream"


async def test_whatever_the_owners_check_does_not_allow_gets_the_pipelines_answer(
    monkeypatch: pytest.MonkeyPatch, dispatched: list[str], owner_reads: str
) -> None:
    owner, token = await person("owner")
    _, strangers = await person("stranger")
    _, inactive = await person("inactive", active=False)
    session_id = await session_of(owner)
    runless = await session_of(owner, run=False)
    cases = [
        (session_id, {"Authorization": f"Token {strangers}"}, 404),
        (session_id, {"Authorization": "Token not-a-token"}, 401),
        (session_id, {"Authorization": f"Token {inactive}"}, 401),
        (session_id, {"Authorization": "Token"}, 401),
        (session_id, {"Authorization": f"Token {token} more"}, 401),
        (session_id, {"Authorization": f"token  {token}", "Last-Event-ID": "x"}, 400),
        (session_id, {"Authorization": f"Bearer {token}"}, 401),
        (session_id, {}, 401),
        (session_id, {"Authorization": f"Token {token}", "Last-Event-ID": "x"}, 400),
        (runless, {"Authorization": f"Token {token}"}, 204),
        (str(uuid.uuid4()), {"Authorization": f"Token {token}"}, 204),
    ]
    for session, headers, expected in cases:
        dispatched.clear()
        answer = await get(f"/api/chat/{session}", headers)
        assert answer[0] == expected, (headers, answer)
        assert dispatched == [f"/api/chat/{session}"], headers  # the pipeline answered it
        with monkeypatch.context() as patch:
            through_the_pipeline(patch)
            assert await get(f"/api/chat/{session}", headers) == answer, headers


async def test_the_owners_resume_that_gets_no_stream_is_answered_here_as_the_pipeline_does(
    monkeypatch: pytest.MonkeyPatch, dispatched: list[str]
) -> None:
    owner, token = await person("owner")
    live, ended, failed = await session_of(owner), await session_of(owner), await session_of(owner)
    await get_stream_manager().end_stream(ended)
    await get_stream_manager().fail_stream(failed, "the model broke")
    auth = {"Authorization": f"Token {token}"}
    cases = [
        (live, {**auth, "Last-Event-ID": "99"}, 400),  # past the end of the stream
        (ended, auth, 204),  # the run ended, and the client asks for no position after it
        (failed, auth, 410),
    ]
    for session, headers, expected in cases:
        dispatched.clear()
        answer = await get(f"/api/chat/{session}", headers)
        assert (answer[0], dispatched) == (expected, []), headers  # answered here
        assert answer[1]["Allow"] == "GET, POST, DELETE, HEAD"
        with monkeypatch.context() as patch:
            through_the_pipeline(patch)
            assert await get(f"/api/chat/{session}", headers) == answer


async def test_a_caller_at_its_cap_and_a_database_that_fails_are_answered_alike(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    owner, token = await person("owner")
    auth = {"Authorization": f"Token {token}"}
    settings.HELIX = {**settings.HELIX, "MAX_STREAMS_PER_CALLER": 0}
    session_id = await session_of(owner)  # (the change of HELIX made a new in-memory store)
    capped = await get(f"/api/chat/{session_id}", auth)  # left to the pipeline, which refuses it
    assert capped[0] == 429 and json.loads(capped[2])["code"] == "TOO_MANY_STREAMS"
    settings.HELIX = {**settings.HELIX, "MAX_STREAMS_PER_CALLER": 16}
    session_id = await session_of(owner)

    async def down(*args: Any) -> Any:
        raise DatabaseUnavailableError()

    monkeypatch.setattr("chat.http.owner_resume.together", down)
    monkeypatch.setattr("chat.http.pipeline.together", down)
    failed = await get(f"/api/chat/{session_id}", auth)
    assert failed[0] == 503 and json.loads(failed[2])["code"] == "DATABASE_UNAVAILABLE"
    with monkeypatch.context() as patch:
        through_the_pipeline(patch)
        assert await get(f"/api/chat/{session_id}", auth) == failed


async def test_a_site_whose_pipeline_decides_more_gets_its_pipeline(dispatched: list[str]) -> None:
    owner, token = await person("owner")
    session_id = await session_of(owner)
    auth = {"Authorization": f"Token {token}"}
    for helix in (
        {"PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"]},  # the owner is no admin
        {"AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"]},
    ):
        with override_settings(HELIX=helix):
            assert (await get(f"/api/chat/{session_id}", auth))[0] in (401, 403), helix
    assert len(dispatched) == 2
    dispatched.clear()
    fresh = await session_of(owner)  # (a change of HELIX above made a new in-memory store)
    with override_settings(ROOT_URLCONF="tests.chat.http.site_urls"):
        status, _, body = await get(f"/wrapped/chat/{fresh}/stream", auth)
        assert (status, body) == (503, b"closed for maintenance")  # the site's decorator answered
        assert dispatched == []
        audited = await get(f"/audited/chat/{fresh}", auth)
        assert audited[0] == 200 and audited[1]["X-Audited"] == "yes"
        assert (await get(f"/configured/chat/{fresh}", auth))[0] == 200
        # The pipeline knows the session by its `session_id` keyword only: by position, none.
        assert (await get(f"/positional/chat/{fresh}", auth))[0] == 204
        assert [p.split("/")[1] for p in dispatched] == ["audited", "configured", "positional"]
        dispatched.clear()
        assert (await get(f"/api/chat/{fresh}", auth))[0] == 200  # Helix's view as chat.urls makes it
        assert dispatched == []  # answered here


def test_the_headers_read_here_are_the_ones_djangos_request_would_give() -> None:
    """The owner's check reads its headers without making Django's request: under the same
    ``META`` names, a repeated header (two tokens, say) joined as Django joins it, which the
    token's check then refuses as DRF's would."""
    headers = [
        (b"authorization", b"Token one"),
        (b"Authorization", b"Token two"),
        (b"last-event-id", b"7"),
        (b"cookie", b"a=1; "),
        (b"cookie", b"b=2"),
        (b"content-type", b"text/plain"),
        (b"x-caf\xe9", b"cr\xe8me"),
        (b"last_event_id", b"99"),  # no header of a hyphenated name comes from one with an underscore
    ]
    request = scope("/api/chat/x", headers={}) | {"headers": headers}
    django_meta = ASGIRequest(request, io.BytesIO()).META
    ours = HeadersOnly(request).META
    assert ours == {key: value for key, value in django_meta.items() if key.startswith(("HTTP_", "CONTENT_"))}
    assert ours["HTTP_AUTHORIZATION"] == "Token one,Token two" and ours["HTTP_LAST_EVENT_ID"] == "7"
    assert TokenAuthentication().read_ahead(cast(Any, HeadersOnly(request))) is None  # three words


def test_a_run_is_read_for_the_active_owner_of_its_session_alone(django_assert_num_queries: Any) -> None:
    """The owner's check and the session's latest run in one read (``OwnedRuns``): the run only
    for an active user whose token it is and who owns the session; read ahead for a hop's pairs
    in one query that answers each pair as its own read does."""

    def someone(name: str, *, active: bool = True) -> tuple[User, str]:
        user = User.objects.create_user(f"{name}-{uuid.uuid4().hex[:6]}", password="pw", is_active=active)
        return user, Token.objects.create(user=user).key

    owner, token = someone("owner")
    _, strangers = someone("stranger")
    inactive, sleepers = someone("inactive", active=False)
    session = ChatSession.objects.create(agent="chat", owner=owner)
    Run.objects.create(session=session, agent="chat", status="completed", message_id="m-1")
    latest = Run.objects.create(session=session, agent="chat", status="running", message_id="m-2", start_sequence=9)
    runless = ChatSession.objects.create(agent="chat", owner=owner)
    dormant = ChatSession.objects.create(agent="chat", owner=inactive)
    Run.objects.create(session=dormant, agent="chat", status="running", message_id="m-3")
    absent, _ = someone("absent")  # whose token no one in the hop sends
    elsewhere = ChatSession.objects.create(agent="chat", owner=absent)
    Run.objects.create(session=elsewhere, agent="chat", status="running", message_id="m-4")
    owned = owner_resume.owned_runs(TokenAuthentication().owner_read())
    assert owned is not None
    pairs = [
        (token, session.pk),
        (strangers, session.pk),  # someone else's session
        (sleepers, dormant.pk),  # an inactive owner
        ("not-a-token", session.pk),
        (token, runless.pk),
        (token, "no-such-session"),
        (token, elsewhere.pk),
    ]
    alone = [owned.owned_run(key, session_id) for key, session_id in pairs]
    found = alone[0]
    assert found is not None and found[1] == owner.pk
    assert (found[0].run_id, found[0].message_id, found[0].start_sequence) == (str(latest.pk), "m-2", 9)
    assert alone[1:] == [None] * 6
    with shared_reads():
        with django_assert_num_queries(1):  # the pairs' tokens, owners, sessions and runs at once
            owned.read_ahead(pairs)
            assert owned.owned_run(*pairs[0]) == found
        # A pair whose session came back with another key reads for itself (the database may
        # match a key that differs from the row's): the stranger's and the unknown token. The
        # inactive owner's came back, and says no; the others' sessions came back with none of
        # the keys, or not at all.
        with django_assert_num_queries(2):
            assert [owned.owned_run(*pair) for pair in pairs[1:]] == alone[1:]


def test_a_site_whose_models_cannot_join_its_tokens_to_sessions_gets_two_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the join would not ask what the token's own read asks, the owner's check makes the
    pipeline's two reads: a user model that decides itself who may sign in, a token model that
    hides its name in queries, belongs to another model than sessions' owners, has keys that are
    not unique, or a manager that leaves tokens out."""
    monkeypatch.setattr(owner_resume, "_owned_runs", {})

    class Owners:
        def __init__(self, *, by_key: Any = True, relation: str = "auth_token", user: Any = User, model: Any = Token):
            self.by_key = by_key
            field = type(
                "Field", (), {"name": "user", "related_model": user, "related_query_name": lambda self: relation}
            )
            self.tokens = type("Tokens", (), {"user_field": field(), "model": model})()

    def model(*, unique: bool = True, objects: Any = Token.objects) -> Any:
        return SimpleNamespace(
            _meta=SimpleNamespace(get_field=lambda name: SimpleNamespace(unique=unique)), objects=objects
        )

    live = SimpleNamespace(all=lambda: Token.objects.filter(key__startswith="live-"))
    assert owner_resume.owned_runs(cast(Any, Owners())) is not None
    assert owner_resume.owned_runs(cast(Any, Owners(model=model()))) is not None
    for refused in (
        Owners(by_key=None),
        Owners(relation="+"),
        Owners(user=Group),
        Owners(model=model(unique=False)),
        Owners(model=model(objects=live)),
    ):
        assert owner_resume.owned_runs(cast(Any, refused)) is None


class EveryModelToDefault:
    """A database router that leaves every read where it would go anyway."""


@override_settings(DATABASE_ROUTERS=[f"{__name__}.EveryModelToDefault"])
async def test_a_site_with_database_routers_reads_the_token_and_the_session_where_they_route(
    compiled_reads: list[tuple[CompiledRead, int]], dispatched: list[str]
) -> None:
    owner, token = await person("owner")
    session_id = await session_of(owner)
    compiled_reads.clear()
    assert (await get(f"/api/chat/{session_id}", {"Authorization": f"Token {token}"}))[0] == 200
    assert dispatched == []  # answered here
    tokens = TokenAuthentication().owner_read().by_key
    assert tokens is not None
    assert [read for read, _ in compiled_reads] == [tokens.read, reads._LATEST_RUN_AND_OWNER]


async def test_the_owners_and_everyone_elses_resumes_of_one_hop_each_get_their_answer(
    monkeypatch: pytest.MonkeyPatch, dispatched: list[str]
) -> None:
    owner, token = await person("owner")
    _, strangers = await person("stranger")
    sleeper, sleepers = await person("inactive", active=False)
    session_id, runless = await session_of(owner), await session_of(owner, run=False)
    dormant = await session_of(sleeper)
    ownerless = await sync_to_async(ChatSession.objects.create)(agent="chat")
    await sync_to_async(Run.objects.create)(session=ownerless, agent="chat", status="running", message_id="m")
    cases = [
        (session_id, token, 200),
        (session_id, strangers, 404),
        (dormant, sleepers, 401),
        (runless, token, 204),
        (ownerless.pk, token, 404),
        (str(uuid.uuid4()), token, 204),
    ]
    answers = await asyncio.gather(
        *(get(f"/api/chat/{session}", {"Authorization": f"Token {key}"}) for session, key, _ in cases)
    )
    assert [answer[0] for answer in answers] == [expected for _, _, expected in cases]
    assert sorted(dispatched) == sorted(f"/api/chat/{session}" for session, _, _ in cases[1:])
    with monkeypatch.context() as patch:
        through_the_pipeline(patch)
        for (session, key, _), answer in zip(cases, answers, strict=True):
            again = await get(f"/api/chat/{session}", {"Authorization": f"Token {key}"})
            assert again[:2] == answer[:2], (session, key)


async def test_the_owners_resumes_of_one_hop_are_checked_in_one_query(
    compiled_reads: list[tuple[CompiledRead, int]],
) -> None:
    people = [await person(f"owner{n}") for n in range(5)]
    sessions = [await session_of(owner) for owner, _ in people]
    compiled_reads.clear()
    answers = await asyncio.gather(
        *(
            get(f"/api/chat/{s}", {"Authorization": f"Token {token}"})
            for s, (_, token) in zip(sessions, people, strict=True)
        )
    )
    assert [status for status, _, _ in answers] == [200] * 5
    owned = owner_resume.owned_runs(TokenAuthentication().owner_read())
    assert owned is not None
    assert compiled_reads == [(owned.many, 16)]  # five sessions and five keys, each padded to a power of two
    assert owned.many._compiled[("default", 16)] is not None  # its SQL made once, not by the ORM each time
