"""The chat POST rate limit is DRF throttling on the stream Redis: per caller across every web
process, not per process. Two Daphne processes, one user alternating between them. An anonymous
caller is counted by its address, which neither a new session nor a forged X-Forwarded-For changes."""

from __future__ import annotations

import http.client
import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from importlib import import_module
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.cache import caches
from django.test import AsyncClient

from tests.chat.http import requests
from tests.live import serve_site

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def two_servers(test_database: str, redis_url: str) -> Iterator[list[int]]:
    env = {
        "HELIX_STREAM_BACKEND": "redis",
        "REDIS_URL": redis_url,
        "DATABASE_URL": test_database,
        "HELIX_CHAT_RATE": "3/minute",
        "HELIX_SCRIPTED_DELAY_MS": "0",
    }
    with ExitStack() as stack:
        yield [stack.enter_context(serve_site(env)), stack.enter_context(serve_site(env))]


def post(port: int, token: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    body = json.dumps({"message": "hi"})
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    connection.request("POST", f"/api/chat/{uuid.uuid4()}", body, headers)
    response = connection.getresponse()
    return response.status, dict(response.headers), response.read()


def test_the_rate_limit_holds_across_web_processes(two_servers: list[int], token: str) -> None:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    first, second = two_servers
    statuses = [post(port, token)[0] for port in (first, second, first)]
    assert statuses == [200, 200, 200]
    for port in (second, first):  # the fourth and fifth, on either process
        status, headers, body = post(port, token)
        assert status == 429 and json.loads(body)["code"] == "RATE_LIMITED"
        assert 0 < int(headers["Retry-After"]) <= 60
    other = User.objects.create_user(f"other-{uuid.uuid4().hex[:6]}", password="pw")
    assert post(second, Token.objects.create(user=other).key)[0] == 200  # per caller, not global


class _User:
    pk = f"throttled-{uuid.uuid4().hex[:8]}"
    is_authenticated = True


class _Request:
    def __init__(self, method: str) -> None:
        self.method = method
        self.user = _User()


class _View:
    throttled_post = True


def test_a_request_it_does_not_count_does_not_look_up_its_cache_or_rate(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """Every request makes the throttle; only a chat POST needs its cache and rate."""
    from chat.http import throttling

    settings.HELIX = {**settings.HELIX, "THROTTLE_RATES": {"helix_chat": "5/minute"}}
    looked_up: list[str] = []

    def cache() -> Any:
        looked_up.append("cache")
        return caches["default"]

    monkeypatch.setattr(throttling, "throttle_cache", cache)
    throttle: Any = throttling.ChatPostThrottle()
    assert throttle.allow_request(_Request("GET"), _View()) and looked_up == []
    throttle.allow_request(_Request("POST"), _View())
    assert looked_up == ["cache"] and (throttle.num_requests, throttle.duration) == (5, 60)

    class Stricter(throttling.ChatPostThrottle):
        rate = "1/minute"

    looked_up.clear()
    stricter: Any = Stricter()  # a subclass may read them anywhere: looked up as it is made
    assert looked_up == ["cache"] and (stricter.num_requests, stricter.duration) == (1, 60)


@pytest.fixture
def anonymous(settings: Any) -> None:
    """Anonymous chat, at three POSTs a minute."""
    settings.HELIX = {
        **settings.HELIX,
        "ALLOW_ANONYMOUS": True,
        "THROTTLE_RATES": {"helix_chat": "3/minute"},
        "SCRIPTED_DELAY_MS": "0",
    }


async def visit(client: AsyncClient, headers: dict[str, str] | None = None) -> int:
    """The status of one chat POST, its stream read to the end."""
    response = await requests.post(client, str(uuid.uuid4()), {"message": "hi"}, headers)
    if response.status_code == 200:
        await requests.read_events(response)
    return int(response.status_code)


async def with_fresh_session() -> AsyncClient:
    session = import_module(django_settings.SESSION_ENGINE).SessionStore()
    await session.acreate()
    client = AsyncClient()
    client.cookies[django_settings.SESSION_COOKIE_NAME] = str(session.session_key)
    return client


async def test_an_anonymous_caller_is_counted_by_its_address_not_its_forwarded_for(anonymous: None) -> None:
    statuses = [await visit(AsyncClient(), {"X-Forwarded-For": f"198.51.100.{n}"}) for n in range(5)]
    assert statuses == [200, 200, 200, 429, 429]


async def test_an_anonymous_caller_is_counted_by_its_address_not_its_session(anonymous: None) -> None:
    statuses = [await visit(await with_fresh_session()) for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]


async def test_behind_proxies_the_forwarded_address_they_added_is_the_caller(anonymous: None, settings: Any) -> None:
    settings.REST_FRAMEWORK = {**getattr(settings, "REST_FRAMEWORK", {}), "NUM_PROXIES": 1}
    first = [await visit(AsyncClient(), {"X-Forwarded-For": f"10.0.0.{n}, 198.51.100.1"}) for n in range(4)]
    assert first == [200, 200, 200, 429]  # what the client put before the proxy's entry is ignored
    assert await visit(AsyncClient(), {"X-Forwarded-For": "198.51.100.2"}) == 200


@pytest.mark.django_db(transaction=True)
async def test_a_rate_limit_whose_redis_is_down_refuses_typed_and_stores_nothing(settings: Any) -> None:
    """The counters live in Redis; when it cannot be reached, a chat POST is a typed 503 (not
    a 500, and not an uncounted request)."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from chat.http import throttling
    from chat.models import ChatSession

    class Unreachable:
        def get(self, *args: Any, **kwargs: Any) -> Any:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

        set = get

    original = throttling.throttle_cache
    throttling.throttle_cache = lambda: Unreachable()  # type: ignore[assignment,return-value]
    try:
        alice = await requests.login("alice")
        session_id = str(uuid.uuid4())
        response = await requests.post(alice, session_id, {"message": "hi"})
    finally:
        throttling.throttle_cache = original
    assert (response.status_code, response.json()["code"]) == (503, "STREAM_UNAVAILABLE")
    assert not await ChatSession.objects.filter(pk=session_id).aexists()
