"""Shared fixtures. Redis is provided by the test command (``bin/test``), never started here:
``HELIX_TEST_REDIS_URL`` names it. A test that needs Redis fails when it is unreachable."""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis

from streams.backends import InMemoryStreamManager, RedisStreamManager, StreamManager

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("HELIX_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


#: Fixtures that mean a test starts processes of its own (servers, workers, Node clients).
LIVE_FIXTURES = {"test_database", "chat_client", "live_client"}
TIERS_BY_PATH = {"chaos": "chaos", "host": "host"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test's tiers, from where it lives and what it uses (see ``markers`` in pyproject.toml)."""
    for item in items:
        path = Path(str(item.path)).relative_to(ROOT).parts
        names = set(getattr(item, "fixturenames", ()))
        tiers = set()
        if len(path) > 2 and path[1] in TIERS_BY_PATH:
            tiers.add(TIERS_BY_PATH[path[1]])
        if "browser" in names:  # headless Chromium
            tiers.add("browser")
        if names & LIVE_FIXTURES:
            tiers.add("live")
        if names & {"redis_url", "backend_factory"}:  # the backend factory's Redis is asked for late
            tiers.add("redis")
        if item.get_closest_marker("django_db") is not None:
            tiers.add("postgres")
        for tier in sorted(tiers or {"unit"}):
            item.add_marker(tier)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis; fails loudly when it is not running."""
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis at {REDIS_URL} is required (run the tests with bin/test): {exc}")
    return REDIS_URL


@pytest.fixture(autouse=True)
def _fresh_throttles() -> Iterator[None]:
    """Throttle counters key on user ids, which a flushed test database hands out again."""
    from django.core.cache import cache

    cache.clear()
    yield


@pytest.fixture
def key_prefix() -> str:
    return f"test:{uuid.uuid4().hex[:10]}:"


@pytest.fixture
def redis_client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


async def _make_redis(redis_url: str, key_prefix: str, **options: object) -> RedisStreamManager:
    return RedisStreamManager(redis_url, key_prefix=key_prefix, retry_timeout=5.0, **options)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "redis"])
async def backend_factory(request: pytest.FixtureRequest, key_prefix: str) -> AsyncIterator[object]:
    """Builds managers of the parametrized backend with given options; closes them afterwards."""
    made: list[StreamManager] = []

    async def make(**options: object) -> StreamManager:
        if request.param == "memory":
            manager: StreamManager = InMemoryStreamManager(**options)  # type: ignore[arg-type]
        else:
            manager = await _make_redis(request.getfixturevalue("redis_url"), key_prefix, **options)
        made.append(manager)
        return manager

    make.backend = request.param  # type: ignore[attr-defined]
    yield make
    for manager in made:
        await manager.aclose()


@pytest.fixture
async def manager(backend_factory) -> StreamManager:  # type: ignore[no-untyped-def]
    """A stream manager of each backend (memory, redis), with a fresh key prefix."""
    manager: StreamManager = await backend_factory()
    return manager


@pytest.fixture
async def redis_manager(redis_url: str, key_prefix: str) -> AsyncIterator[RedisStreamManager]:
    manager = await _make_redis(redis_url, key_prefix)
    yield manager
    await manager.aclose()


@pytest.fixture(scope="session")
def chat_client():  # type: ignore[no-untyped-def]
    """The real AI SDK chat client (Node), for the bridge conformance tests."""
    from tests.chat.ai_sdk.client import ChatClient

    client = ChatClient()
    yield client
    client.close()


@pytest.fixture(scope="session")
def test_database(django_db_setup, django_db_blocker) -> str:  # type: ignore[no-untyped-def]
    """The URL of the test database, for the server and worker processes tests start."""
    from django.db import connection

    with django_db_blocker.unblock():
        settings = connection.settings_dict
        name = str(settings["NAME"])
    test_name = (settings.get("TEST") or {}).get("NAME")
    if (test_name and name != str(test_name)) or not (test_name or name.startswith("test_")):
        # pytest-django only creates the test database when a collected test is marked
        # django_db; without one this would be the developer's database.
        pytest.fail("tests that start servers on the test database must be marked django_db")
    if settings["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{name}"
    user, password = settings.get("USER") or "", settings.get("PASSWORD") or ""
    credentials = f"{user}:{password}@" if password else f"{user}@" if user else ""
    return f"postgres://{credentials}{settings['HOST']}:{settings['PORT']}/{name}"


@pytest.fixture(scope="session")
def celery_worker(test_database: str, redis_url: str) -> Iterator[dict[str, str]]:
    """A `celery -A helix_site worker` process on its own queue."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "helix_site.settings",
        "REDIS_URL": redis_url,
        "HELIX_STREAM_BACKEND": "redis",
        "DATABASE_URL": test_database,
        "HELIX_CELERY_QUEUE": queue,
        "HELIX_SCRIPTED_DELAY_MS": "3",
        "HELIX_WORKER_CONCURRENCY": "20",
        "HELIX_AGENT_MODULES": "workers.demo_agents,tests.agents",
    }
    from tests.live import start_celery_worker, use_broker

    log_path = Path(tempfile.mkdtemp(prefix="helix-celery-")) / "worker.log"
    process = start_celery_worker(env, queue, log_path)
    previous = use_broker(redis_url)
    yield {"queue": queue, "log": str(log_path), "database": test_database}
    use_broker(previous)
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()


def server_env(celery_worker: dict[str, str], redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of a Daphne serving the site on ``celery_worker`` (its queue and database)
    and Redis streams, with ``extra`` settings on top."""
    return {
        "HELIX_EXECUTOR": "celery",
        "HELIX_STREAM_BACKEND": "redis",
        "REDIS_URL": redis_url,
        "DATABASE_URL": celery_worker["database"],
        "HELIX_CELERY_QUEUE": celery_worker["queue"],
        "HELIX_SCRIPTED_DELAY_MS": "3",
        "HELIX_AGENT_MODULES": "workers.demo_agents,tests.agents",
        "HELIX_CHAT_RATE": "1000/minute",  # the live tests send far more than a person would
        **extra,
    }


@pytest.fixture(scope="session", params=["daphne", "uvicorn"])
def helix_server(request: pytest.FixtureRequest, celery_worker: dict[str, str], redis_url: str) -> Iterator[str]:
    """The site under each supported server (Daphne, uvicorn) with the Celery executor, Redis
    streams and the test database."""
    from tests.live import serve_site

    with serve_site(server_env(celery_worker, redis_url), request.param) as port:
        yield f"http://127.0.0.1:{port}"
