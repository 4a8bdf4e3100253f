"""Helix settings: defaults, environment, the backend manager and system checks."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from helix_site.env import env_bool, env_choice, env_list
from streams.backends import InMemoryStreamManager, RedisStreamManager, get_stream_manager
from streams.checks import check_helix_settings
from streams.conf import helix_settings
from streams.exceptions import ConfigurationError


def ids(settings: dict[str, object]) -> list[str]:
    with override_settings(HELIX=settings):
        return [error.id for error in check_helix_settings()]  # type: ignore[misc]


def test_defaults() -> None:
    with override_settings(HELIX={}):
        assert helix_settings.STREAMS == {"BACKEND": "memory", "OPTIONS": {}}
        assert helix_settings.EXECUTOR == "inprocess"
        assert helix_settings.SSE_KEEPALIVE_SECONDS == 15.0
        assert isinstance(get_stream_manager(), InMemoryStreamManager)
        assert get_stream_manager() is get_stream_manager()  # one per process
    with pytest.raises(AttributeError):
        _ = helix_settings.NOT_A_SETTING


def test_a_setting_read_once_follows_a_change_of_the_settings() -> None:
    """Settings are kept as attributes once read (every request reads a few); a change of
    ``HELIX`` drops them, and the restored settings are read again."""
    before = helix_settings.SSE_KEEPALIVE_SECONDS
    with override_settings(HELIX={"SSE_KEEPALIVE_SECONDS": 2.5}):
        assert helix_settings.SSE_KEEPALIVE_SECONDS == 2.5
        assert helix_settings.SSE_KEEPALIVE_SECONDS == 2.5
    restored = helix_settings.SSE_KEEPALIVE_SECONDS
    assert restored == before


def test_partial_settings_merge_over_defaults_and_pick_the_backend() -> None:
    with override_settings(HELIX={"STREAMS": {"BACKEND": "redis", "OPTIONS": {"url": "redis://h:1/2", "ttl": 60}}}):
        manager = get_stream_manager()
        assert isinstance(manager, RedisStreamManager)
        assert (manager.url, manager.ttl) == ("redis://h:1/2", 60)
        assert helix_settings.EXECUTOR == "inprocess"
        assert ids({"STREAMS": {"BACKEND": "redis", "OPTIONS": {"url": "redis://h:1/2"}}}) == []


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"STREAMS": "redis"}, ["helix.E001"]),
        ({"STREAMS": {"BACKEND": "nosuch"}}, ["helix.E002"]),
        ({"STREAMS": {"BACKEND": "django.http.HttpResponse"}}, ["helix.E002"]),
        ({"STREAMS": {"BACKEND": "memory", "OPTIONS": []}}, ["helix.E003"]),
        ({"STREAMS": {"BACKEND": "memory", "OPTIONS": {"url": "redis://x"}}}, ["helix.E004"]),
        ({"STREAMS": {"BACKEND": "memory", "OPTIONS": {"ttl": -5}}}, ["helix.E005"]),
        ({"STREAMS": {"BACKEND": "memory", "OPTIONS": {"max_length": 1.5}}}, ["helix.E005"]),
        ({"STREAMS": {"BACKEND": "redis", "OPTIONS": {"max_connections": "4"}}}, ["helix.E005"]),
        ({"STREAMS": {"BACKEND": "redis", "OPTIONS": {"url": "http://x"}}}, ["helix.E006"]),
        ({"EXECUTOR": "threads"}, ["helix.E007"]),
        ({"SSE_KEEPALIVE_SECONDS": 0}, ["helix.E008"]),
        ({"SLOW_CLIENT_TIMEOUT_SECONDS": "soon"}, ["helix.E008"]),
    ],
)
def test_system_checks_name_the_broken_setting(settings: dict[str, object], expected: list[str]) -> None:
    assert ids(settings) == expected


def test_bad_backend_raises_a_configuration_error() -> None:
    bad = {"STREAMS": {"BACKEND": "memory", "OPTIONS": {"bogus": 1}}}
    with override_settings(HELIX=bad), pytest.raises(ConfigurationError) as info:
        get_stream_manager()
    assert info.value.status_code == 501


def test_env_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_BOOL", "Yes")
    monkeypatch.setenv("X_LIST", "a, b,,c")
    monkeypatch.setenv("X_CHOICE", "Redis")
    assert env_bool("X_BOOL", False) is True
    assert env_bool("X_UNSET", True) is True
    assert env_list("X_LIST", []) == ["a", "b", "c"]
    assert env_choice("X_CHOICE", "memory", ("memory", "redis")) == "redis"
    monkeypatch.setenv("X_BOOL", "perhaps")
    with pytest.raises(ImproperlyConfigured, match="X_BOOL"):
        env_bool("X_BOOL", False)
    with pytest.raises(ImproperlyConfigured, match="X_CHOICE"):
        env_choice("X_CHOICE", "memory", ("memory",))


SETUP = "import django; django.setup(); from django.conf import settings"


def _settings_in_subprocess(env: dict[str, str], expression: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import django; django.setup(); from django.conf import settings; print(repr(({expression})))",
        ],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "helix_site.settings", **env},
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() or result.stderr.strip().splitlines()[-1]


def test_environment_variables_configure_the_site() -> None:
    env = {
        "HELIX_STREAM_BACKEND": "redis",
        "REDIS_URL": "redis://cache:6380/3",
        "HELIX_EXECUTOR": "celery",
        "DJANGO_DEBUG": "1",
        "DJANGO_ALLOWED_HOSTS": "chat.example.com,api.example.com",
        "DATABASE_URL": "sqlite:////srv/helix/chat.sqlite3",
        "DJANGO_SECRET_KEY": "s3cret",
        "HELIX_ALLOW_ANONYMOUS": "1",
        "HELIX_SLOW_CLIENT_TIMEOUT": "12.5",
        "HELIX_REDIS_RETRY_TIMEOUT": "45",
    }
    expression = (
        "settings.HELIX['STREAMS'], settings.HELIX['EXECUTOR'], settings.HELIX['ALLOW_ANONYMOUS'],"
        " settings.HELIX['SLOW_CLIENT_TIMEOUT_SECONDS'], settings.DEBUG, settings.ALLOWED_HOSTS,"
        " settings.DATABASES['default']['NAME'], settings.SECRET_KEY, settings.CELERY_BROKER_URL"
    )
    assert _settings_in_subprocess(env, expression) == (
        "({'BACKEND': 'redis', 'OPTIONS': {'url': 'redis://cache:6380/3', 'retry_timeout': 45.0}}, 'celery', True, "
        "12.5, True, "
        "['chat.example.com', 'api.example.com'], '/srv/helix/chat.sqlite3', 's3cret', 'redis://cache:6380/3')"
    )
    # Every key the demo site sets is one Helix knows (the check for unknown keys would say so).
    assert (
        _settings_in_subprocess(env, "sorted(set(settings.HELIX) - set(__import__('streams.conf').conf.DEFAULTS))")
        == "[]"
    )


def test_safe_defaults_and_bad_environment() -> None:
    clean = {"HELIX_STREAM_BACKEND": "", "HELIX_EXECUTOR": "", "DJANGO_DEBUG": "", "DATABASE_URL": ""}
    assert _settings_in_subprocess(clean, "settings.DEBUG, settings.HELIX['STREAMS']['BACKEND']") == "(False, 'memory')"
    assert "sqlite3" in _settings_in_subprocess(clean, "settings.DATABASES['default']['ENGINE']")
    assert "HELIX_STREAM_BACKEND must be one of memory, redis" in _settings_in_subprocess(
        {"HELIX_STREAM_BACKEND": "kafka"}, "settings.HELIX"
    )
