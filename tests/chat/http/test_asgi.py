"""Every Helix request is Django's, resumes included; :class:`HelixLimits` touches only Helix's
URLs (a body cap before Django reads it, flow control) and nothing else of the site."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.core.handlers.asgi import ASGIHandler
from rest_framework.authtoken.models import Token

from chat.http.asgi import HelixLimits, helix_prefixes
from chat.models import ChatSession, Run
from streams.backends import get_stream_manager
from tests.chat.http.requests import scope

pytestmark = pytest.mark.django_db(transaction=True)

GATE = "tests.chat.http.middleware.SiteGate"


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


def test_helixs_urls_are_found_under_every_prefix_the_site_mounts_them(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.chat.http.assistant_urls"
    prefixes = helix_prefixes()
    assert prefixes is not None
    assert prefixes.match("/assistant/chat/x/stream") and prefixes.match("/assistant/agents")
    assert not prefixes.match("/api/chat/x") and not prefixes.match("/")
    settings.ROOT_URLCONF = "tests.chat.http.site_urls"  # views of its own, no include of chat.urls
    assert helix_prefixes() is None


async def test_the_rest_of_the_site_is_passed_through_untouched() -> None:
    seen: list[tuple[Any, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((receive, send))

    receive, send = body(b"x" * 100), object()
    limits = HelixLimits(app)
    await limits(scope("/admin/", "POST"), receive, send)
    await limits(scope("/", "GET"), receive, send)
    assert seen == [(receive, send), (receive, send)]


@pytest.mark.parametrize("method", ["POST", "GET", "HEAD", "OPTIONS", "DELETE"])
async def test_a_body_past_the_cap_is_refused_on_every_method_before_django(settings: Any, method: str) -> None:
    settings.HELIX = {**settings.HELIX, "MAX_BODY_BYTES": 10}
    bodies: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        got = b""
        while (message := await receive())["type"] == "http.request":
            got += message["body"]
            if not message["more_body"]:
                break
        bodies.append(got)

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    limits = HelixLimits(app)
    await limits(scope("/api/agents", method), body(b"12345", b"67890"), send)
    assert bodies == [b"1234567890"] and sent == []
    await limits(scope("/api/chat/x", method), body(b"123456", b"789012"), send)
    assert bodies == [b"1234567890"]
    assert sent[0]["status"] == 413 and b"PAYLOAD_TOO_LARGE" in sent[1]["body"]
    sent.clear()
    await limits(scope("/api/chat/x", method, {"Content-Length": "11"}), body(b""), send)
    assert bodies == [b"1234567890"] and sent[0]["status"] == 413


async def run_request(app: Any, request_scope: dict[str, Any], until: bytes) -> list[dict[str, Any]]:
    """Send ``request_scope`` to ``app`` until a body part holding ``until`` (or the end), then
    disconnect; what was sent."""
    sent: list[dict[str, Any]] = []
    disconnect = asyncio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if until in message.get("body", b"") or not message.get("more_body", True):
            disconnect.set()

    await asyncio.wait_for(app(request_scope, receive, send), 10)
    return sent


async def test_a_resume_goes_through_djangos_handler_and_the_sites_middleware(settings: Any) -> None:
    settings.MIDDLEWARE = [GATE, *settings.MIDDLEWARE]
    session_id, token = await owned_session()
    app = HelixLimits(ASGIHandler())
    stream = get_stream_manager()._streams[session_id]  # type: ignore[attr-defined]
    auth = {"Authorization": f"Token {token}"}

    sent = await run_request(app, scope(f"/api/chat/{session_id}/stream", headers=auth), b'"delta":"Hello"')
    headers = dict(sent[0]["headers"])
    assert sent[0]["status"] == 200 and headers[b"X-Site-Gate"] == b"passed"
    assert headers[b"x-vercel-ai-ui-message-stream"] == b"v1"
    assert headers[b"X-Frame-Options"] == b"DENY"  # the site's XFrameOptionsMiddleware ran too
    assert any(b'"delta":"Hello"' in m.get("body", b"") for m in sent)
    await asyncio.sleep(0.05)
    assert len(stream.subscribers) == 0  # the client left: the reader is closed
    assert (await get_stream_manager().get_stream_info(session_id)).status == "active"  # type: ignore[union-attr]

    elsewhere = {**scope(f"/api/chat/{session_id}/stream", headers=auth), "client": ("10.1.2.3", 5000)}
    sent = await run_request(app, elsewhere, b"")
    assert sent[0]["status"] == 403  # the site's gate turned the resume away


async def test_a_request_for_a_host_the_site_does_not_serve_is_refused(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["chat.example.com"]
    session_id, token = await owned_session()
    sent = await run_request(
        HelixLimits(ASGIHandler()), scope(f"/api/chat/{session_id}", headers={"Authorization": f"Token {token}"}), b""
    )
    assert sent[0]["status"] == 400  # Django's DisallowedHost, before any view


async def test_someone_elses_resume_answers_as_an_unknown_session() -> None:
    session_id, _ = await owned_session()
    _, other_token = await owned_session()
    app = HelixLimits(ASGIHandler())
    auth = {"Authorization": f"Token {other_token}"}
    statuses = []
    for path in (f"/api/chat/{session_id}", f"/api/chat/{uuid.uuid4()}", f"/api/chat/{session_id}/stream"):
        sent = await run_request(app, scope(path, headers=auth), b"")
        statuses.append((sent[0]["status"], sent[1].get("body", b"")))
    assert statuses == [(204, b""), (204, b""), (204, b"")]
    sent = await run_request(app, scope(f"/api/chat/{session_id}"), b"")
    assert sent[0]["status"] == 401
