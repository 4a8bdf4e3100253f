"""The ASGI stream route: resumes bypass Django's request handling; a disconnect frees the reader."""

from __future__ import annotations

import asyncio
import gc
import io
import sys
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.urls import clear_url_caches, get_resolver
from rest_framework.authtoken.models import Token

from chat.http.asgi import StreamRouter
from chat.models import ChatSession, Run
from streams.backends import get_stream_manager
from tests.chat.http.requests import scope

pytestmark = pytest.mark.django_db(transaction=True)


async def owned_session() -> tuple[str, str]:
    user = await sync_to_async(User.objects.create_user)(f"u-{uuid.uuid4().hex[:6]}", password="pw-asgi")
    token = await sync_to_async(Token.objects.create)(user=user)
    session = await sync_to_async(ChatSession.objects.create)(agent="chat", owner=user)
    await sync_to_async(Run.objects.create)(session=session, agent="chat", status="running", message_id="m-1")
    writer = await get_stream_manager().create_writer(str(session.pk), "run-1")
    await writer.write({"type": "text_delta", "delta": "Hello"})
    return str(session.pk), token.key


def body(*parts: bytes) -> Any:
    """An ASGI ``receive`` delivering a request body in ``parts``, then a disconnect."""
    messages = [{"type": "http.request", "body": part, "more_body": i < len(parts) - 1} for i, part in enumerate(parts)]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    return receive


def test_the_urlconf_is_imported_when_the_router_is_built(settings: Any) -> None:
    """At startup, not in the first request: after a restart, that one heads a storm of
    reconnecting streams that would all wait for the import."""
    settings.ROOT_URLCONF = "tests.chat.http.assistant_urls"
    clear_url_caches()
    assert "url_patterns" not in vars(get_resolver())
    StreamRouter(None)
    assert "url_patterns" in vars(get_resolver())


def test_the_pipelines_classes_are_imported_when_the_router_is_built(settings: Any) -> None:
    """As the URLconf: the site's authentication classes too, not by the first request."""
    module = "tests.chat.http.startup_auth"
    settings.HELIX = {**settings.HELIX, "AUTHENTICATION_CLASSES": [f"{module}.StartupAuthentication"]}
    sys.modules.pop(module, None)
    StreamRouter(None)
    assert module in sys.modules


def test_a_stream_requests_headers_are_djangos() -> None:
    """Read by name without parsing every header's name (DRF's token authentication asks for one
    per request), and the same as Django's ``request.headers`` however they are read."""
    from django.core.handlers.asgi import ASGIRequest

    from chat.http.asgi import _StreamRequest

    raw = {
        "Authorization": "Token abc",
        "Content-Type": "application/json",
        "Content-Length": "2",
        "X-Forwarded-For": "10.0.0.1",
        "Last-Event-ID": "41",
        "X_Under": "kept",
        "Accept-Language": "en-US,en;q=0.9",
    }
    made = _StreamRequest(scope("/api/chat/x", headers=raw), io.BytesIO()).headers
    django = ASGIRequest(scope("/api/chat/x", headers=raw), io.BytesIO()).headers
    assert made.get("authorization") == "Token abc" and "_store" not in vars(made)  # no names parsed
    names = [*raw, "authorization", "LAST_EVENT_ID", "x-under", "x_under", "content_length", "missing", "", "HTTP-HOST"]
    for name in names:
        assert made.get(name) == django.get(name), name
        assert (name in made) == (name in django), name
    assert dict(made) == dict(django) and len(made) == len(django) and made == django
    with pytest.raises(KeyError):
        made["missing"]


async def test_other_requests_go_to_django() -> None:
    calls: list[str] = []

    async def django_app(scope: Any, receive: Any, send: Any) -> None:
        calls.append(f"{scope['method']} {scope['path']}")

    router = StreamRouter(django_app)
    for method, path in (("POST", "/api/chat/x"), ("GET", "/api/chat/x/snapshot"), ("GET", "/")):
        await router(scope(path, method), body(b""), None)
    assert calls == ["POST /api/chat/x", "GET /api/chat/x/snapshot", "GET /"]


async def test_outside_daphne_a_body_past_the_cap_is_refused_before_django(settings: Any) -> None:
    """Under a server other than Daphne (``send`` is not Daphne's), the router reads bodies as
    they arrive: one within the cap reaches Django whole, one past it is answered 413 and never
    does."""
    settings.HELIX = {**settings.HELIX, "SERVER_MAX_BODY_BYTES": 10}
    bodies: list[bytes] = []

    async def django_app(scope: Any, receive: Any, send: Any) -> None:
        got = b""
        while (message := await receive())["type"] == "http.request":
            got += message["body"]
            if not message["more_body"]:
                break
        bodies.append(got)

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    router = StreamRouter(django_app)
    await router(scope("/api/chat/x", "POST"), body(b"12345", b"67890"), send)
    assert bodies == [b"1234567890"] and sent == []
    await router(scope("/api/chat/x", "POST"), body(b"123456", b"789012"), send)
    assert bodies == [b"1234567890"]
    assert sent[0]["status"] == 413 and b"PAYLOAD_TOO_LARGE" in sent[1]["body"]
    sent.clear()
    await router(scope("/api/chat/x", "POST", {"Content-Length": "11"}), body(b""), send)
    assert bodies == [b"1234567890"] and sent[0]["status"] == 413


async def test_a_resume_streams_and_a_disconnect_releases_the_reader() -> None:
    session_id, token = await owned_session()
    sent: list[dict[str, Any]] = []
    disconnect = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def django_app(*args: Any) -> None:
        raise AssertionError("a resume must not reach Django")

    task = asyncio.ensure_future(
        StreamRouter(django_app)(
            scope(f"/api/chat/{session_id}/stream", headers={"Authorization": f"Token {token}"}), receive, send
        )
    )
    for _ in range(100):
        if any(b'"delta":"Hello"' in m.get("body", b"") for m in sent):
            break
        await asyncio.sleep(0.02)
    assert sent[0]["status"] == 200 and (b"x-vercel-ai-ui-message-stream", b"v1") in sent[0]["headers"]
    stream = get_stream_manager()._streams[session_id]  # type: ignore[attr-defined]
    assert len(stream.subscribers) == 1  # tailing the live stream
    disconnect.set()
    await asyncio.wait_for(task, 5)
    assert len(stream.subscribers) == 0  # the client left: the reader is closed
    assert (await get_stream_manager().get_stream_info(session_id)).status == "active"  # type: ignore[union-attr]


async def test_a_client_that_leaves_during_a_send_that_swallows_the_cancel_still_releases_the_reader() -> None:
    """A server's send can end a wait in the same turn of the loop as the disconnect cancels the
    response, and a wait that swallows the cancel then (as Python 3.11's ``asyncio.wait_for``
    does) must not leave the stream open for a client that is gone."""
    session_id, token = await owned_session()
    in_send = asyncio.Event()
    swallowed = False

    async def receive() -> dict[str, Any]:
        await in_send.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal swallowed
        if message["type"] == "http.response.body" and b'"delta":"Hello"' in message.get("body", b""):
            in_send.set()
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                swallowed = True

    async def django_app(*args: Any) -> None:
        raise AssertionError("a resume must not reach Django")

    task = asyncio.ensure_future(
        StreamRouter(django_app)(
            scope(f"/api/chat/{session_id}/stream", headers={"Authorization": f"Token {token}"}), receive, send
        )
    )
    await asyncio.wait_for(in_send.wait(), 5)
    stream = get_stream_manager()._streams[session_id]  # type: ignore[attr-defined]
    await asyncio.wait_for(task, 5)  # it ends: the stream is live, so it would wait for more
    assert swallowed
    assert len(stream.subscribers) == 0  # the reader is closed


async def test_the_collector_waits_for_a_resumes_first_bytes() -> None:
    """No automatic collection from the request to the stream's first bytes (see
    chat.http.collector), and it is back on after them, and after a refused resume."""
    session_id, token = await owned_session()
    collecting: list[tuple[bytes, bool]] = []
    disconnect = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        collecting.append((message.get("body", b"head"), gc.isenabled()))
        if b'"delta":"Hello"' in message.get("body", b""):
            disconnect.set()

    assert gc.isenabled()
    router = StreamRouter(None)
    headers = {"Authorization": f"Token {token}"}
    await asyncio.wait_for(router(scope(f"/api/chat/{session_id}/stream", headers=headers), receive, send), 5)
    assert collecting[:2] == [(b"head", False), (b": stream-open\n\n", False)]
    assert any(b'"delta":"Hello"' in part and on for part, on in collecting[2:])
    assert gc.isenabled()
    await router(scope(f"/api/chat/{session_id}"), None, send)  # 401: no credentials
    assert gc.isenabled() and collecting[-2:] == [(b"head", False), (collecting[-1][0], False)]


async def test_another_users_resume_is_404_and_unknown_is_204() -> None:
    session_id, _ = await owned_session()
    _, other_token = await owned_session()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    router = StreamRouter(None)
    await router(scope(f"/api/chat/{session_id}", headers={"Authorization": f"Token {other_token}"}), None, send)
    await router(scope(f"/api/chat/{uuid.uuid4()}", headers={"Authorization": f"Token {other_token}"}), None, send)
    await router(scope(f"/api/chat/{session_id}"), None, send)
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [404, 204, 401]


async def test_under_another_prefix_resumes_are_still_served_without_django(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.chat.http.assistant_urls"
    session_id, token = await owned_session()
    sent: list[dict[str, Any]] = []
    reached_django: list[str] = []
    disconnect = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def django_app(scope: Any, receive: Any, send: Any) -> None:
        reached_django.append(scope["path"])

    router = StreamRouter(django_app)
    auth = {"Authorization": f"Token {token}"}
    await router(scope(f"/api/chat/{session_id}", headers=auth), None, None)  # the site's own route
    task = asyncio.ensure_future(router(scope(f"/assistant/chat/{session_id}", headers=auth), receive, send))
    for _ in range(100):
        if any(b'"delta":"Hello"' in m.get("body", b"") for m in sent):
            break
        await asyncio.sleep(0.02)
    assert sent[0]["status"] == 200 and any(b'"delta":"Hello"' in m.get("body", b"") for m in sent)
    disconnect.set()
    await asyncio.wait_for(task, 5)
    assert reached_django == [f"/api/chat/{session_id}"]  # only the site's own route went to Django
