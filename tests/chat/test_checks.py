"""System checks name each misconfiguration at startup, never a traceback at the first request."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from chat.checks import check_chat_settings
from streams.checks import check_helix_settings


def ids(**overrides: Any) -> list[str]:
    with override_settings(**overrides):
        return [m.id for m in [*check_helix_settings(), *check_chat_settings()]]  # type: ignore[misc]


def helix(settings: Any, **keys: Any) -> dict[str, Any]:
    return {**settings.HELIX, **keys}


def test_the_demo_site_in_debug_is_clean(settings: Any) -> None:
    assert ids(DEBUG=True) == []


def test_unknown_keys_are_an_error(settings: Any) -> None:
    assert ids(HELIX=helix(settings, RATE_LIMT=3), DEBUG=True) == ["helix.E009"]


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"AGENT_MODULES": ["no.such.module"]}, ["helix.E102"]),
        ({"AGENT_MODULES": "workers.demo_agents"}, ["helix.E101"]),
        ({"AGENT_MODULES": ["tests.agents"], "DEFAULT_AGENT": "nobody"}, ["helix.W104"]),
        ({"AUTHENTICATION_CLASSES": ["myapp.auth.Nope"]}, ["helix.E105"]),
        ({"THROTTLE_CLASSES": "chat.http.throttling.ChatPostThrottle"}, ["helix.E105"]),
        ({"THROTTLE_CACHE": "shared"}, ["helix.E106"]),
        ({"RUN_TIME_LIMIT_SECONDS": 0}, ["helix.E008"]),
        ({"SERVER_MAX_BODY_BYTES": "10MB"}, ["helix.E008"]),
        ({"SERVER_HEADER_TIMEOUT_SECONDS": 0}, ["helix.E008"]),
        ({"SERVER_MAX_BODY_BYTES": None, "SERVER_HEADER_TIMEOUT_SECONDS": None}, []),
    ],
)
def test_helix_keys(settings: Any, keys: dict[str, Any], expected: list[str]) -> None:
    assert ids(HELIX=helix(settings, **keys), DEBUG=True) == expected


def test_the_demo_agents_with_debug_off_are_a_warning(settings: Any) -> None:
    assert ids(DEBUG=False) == ["helix.W103"]
    assert ids(DEBUG=False, HELIX=helix(settings, AGENT_MODULES=["tests.agents"], DEFAULT_AGENT="broken")) == []


def test_gzip_and_kept_connections_without_health_checks_are_warnings(settings: Any) -> None:
    middleware = ["django.middleware.gzip.GZipMiddleware", *settings.MIDDLEWARE]
    assert ids(DEBUG=True, MIDDLEWARE=middleware) == ["helix.W107"]
    databases = {"default": {**settings.DATABASES["default"], "CONN_MAX_AGE": 60, "CONN_HEALTH_CHECKS": False}}
    assert ids(DEBUG=True, DATABASES=databases) == ["helix.W108"]


def test_a_visibility_timeout_shorter_than_a_run_is_an_error(settings: Any) -> None:
    from celery import current_app

    conf = current_app.conf
    previous = (conf.broker_url, conf.broker_transport_options)
    celery_helix = helix(settings, EXECUTOR="celery", RUN_TIME_LIMIT_SECONDS=1800)
    assert conf.broker_transport == "workers.broker:RedisTransport"  # the demo site's
    try:
        # The app reads CELERY_-prefixed keys, which unprefixed ones do not override (Celery 5.6).
        conf.CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"
        conf.CELERY_BROKER_TRANSPORT_OPTIONS = {}  # kombu's default: an hour
        assert ids(DEBUG=True, HELIX=celery_helix) == []
        conf.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 600}
        assert ids(DEBUG=True, HELIX=celery_helix) == ["helix.E109"]
        assert ids(DEBUG=True, HELIX=helix(settings, EXECUTOR="inprocess")) == []
    finally:
        conf.CELERY_BROKER_URL, conf.CELERY_BROKER_TRANSPORT_OPTIONS = previous


def test_kombus_own_redis_transport_is_a_warning(settings: Any) -> None:
    from celery import current_app

    conf = current_app.conf
    previous = (conf.broker_url, conf.broker_transport)
    celery_helix = helix(settings, EXECUTOR="celery")
    try:
        conf.CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"
        conf.CELERY_BROKER_TRANSPORT = None
        assert ids(DEBUG=True, HELIX=celery_helix) == ["helix.W111"]
        conf.CELERY_BROKER_TRANSPORT = "workers.broker:RedisTransport"
        assert ids(DEBUG=True, HELIX=celery_helix) == []
    finally:
        conf.CELERY_BROKER_URL, conf.CELERY_BROKER_TRANSPORT = previous


def test_a_helix_queue_that_is_not_the_default_one_is_a_deploy_warning(settings: Any) -> None:
    from celery import current_app

    from chat.checks import check_helix_queue

    def ids(**overrides: Any) -> list[str]:
        with override_settings(**overrides):
            return [m.id for m in check_helix_queue()]  # type: ignore[misc]

    conf = current_app.conf
    previous = conf.task_default_queue
    try:
        conf.CELERY_TASK_DEFAULT_QUEUE = "celery"  # a site's own Celery app, as most are
        assert ids(DEBUG=True, HELIX=helix(settings, EXECUTOR="celery", CELERY_QUEUE="helix")) == ["helix.W112"]
        assert ids(DEBUG=True, HELIX=helix(settings, EXECUTOR="inprocess")) == []
        conf.CELERY_TASK_DEFAULT_QUEUE = "helix"
        assert ids(DEBUG=True, HELIX=helix(settings, EXECUTOR="celery", CELERY_QUEUE="helix")) == []
    finally:
        conf.CELERY_TASK_DEFAULT_QUEUE = previous
