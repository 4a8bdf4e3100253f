"""Helix settings: one namespaced dict, ``settings.HELIX``, with defaults in code.

Read values through :data:`helix_settings` (``helix_settings.STREAMS``); it is rebuilt whenever
``HELIX`` changes (``override_settings`` in tests). Keys::

    HELIX = {
        "STREAMS": {                       # the stream store
            "BACKEND": "memory",           # "memory", "redis" or a dotted path to a StreamManager
            "OPTIONS": {},                 # keyword arguments of the backend class
        },
        "EXECUTOR": "inprocess",           # "inprocess" or "celery"
        "CELERY_QUEUE": "helix",           # the queue Helix's tasks go to (not the site's default)
        "AGENT_MODULES": [],               # modules imported to register agents
        "DEFAULT_AGENT": "chat",           # agent of a POST that names none
        "LLM": {},                         # OpenAIChatModel.from_settings: MODEL, BASE_URL, API_KEY, ...
        "SCRIPTED_DELAY_MS": "20-40",      # per-token delay of the scripted demo model
        "AUTHENTICATION_CLASSES": None,    # DRF classes; None: REST_FRAMEWORK's defaults
        "PERMISSION_CLASSES": None,        # DRF classes; None: REST_FRAMEWORK's defaults
        "THROTTLE_CLASSES": None,          # DRF classes; None: Helix's chat POST throttle
        "THROTTLE_RATES": {"helix_chat": "30/minute"},   # chat POSTs per caller
        "THROTTLE_CACHE": None,            # cache alias; None: the stream Redis when streams are there
        "ALLOW_ANONYMOUS": False,          # visitors without an account may chat
        "OVERRIDE_PERMISSION_CLASSES": [], # DRF classes a POST must pass to send `messages`/`state`
                                           # overrides; []: refused over HTTP (400)
        "SSE_KEEPALIVE_SECONDS": 15.0,     # idle time before an SSE keep-alive comment
        "SLOW_CLIENT_TIMEOUT_SECONDS": 30.0,  # a client that reads nothing this long is dropped
        "MAX_STREAMS_PER_CALLER": 16,      # streams one user (or visitor) may have open per web
                                           # process; one more answers 429 TOO_MANY_STREAMS
        "MAX_MESSAGE_CHARS": 20_000,       # longest user message
        "MAX_MESSAGES": 500,               # longest history a POST may carry
        "MAX_BODY_BYTES": 1_048_576,       # largest chat POST body
        "SERVER_MAX_BODY_BYTES": 10_485_760,  # any request body of the site past this
                                           # is refused (413) while it arrives; None: no limit
        "SERVER_HEADER_TIMEOUT_SECONDS": 10.0,  # under Daphne: a new connection's request headers
                                           # must be complete this soon; None: no deadline
        "CONTENT_REPLAY": True,            # resumed streams replay the in-flight content
        "DOUBLE_TEXTING": "reattach",      # a POST while a run is in flight: reject, reattach,
                                           # interrupt or enqueue
        "DOUBLE_TEXTING_WAIT_SECONDS": 30.0,  # how long interrupt/enqueue wait for the run to end
        "RUN_TIME_LIMIT_SECONDS": 1800,    # a run still going after this long fails
        "LEASE_SECONDS": 4.0,              # a run whose worker is silent this long is taken over
        "HEARTBEAT_SECONDS": 1.0,          # how often a worker renews the leases of its runs
        "MAX_ATTEMPTS": 3,                 # attempts (worker losses) before a run fails
        "REAP_INTERVAL_SECONDS": 1.0,      # how often the reaper looks for expired leases
        "APPROVAL_TTL_SECONDS": 86_400,    # a paused tool call unanswered this long is denied
    }

Every key is in :data:`DEFAULTS`; a key that is not is reported by the system checks.
"""

from __future__ import annotations

import copy
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

__all__ = ["BACKEND_ALIASES", "DEFAULTS", "EXECUTORS", "HelixSettings", "helix_settings"]

BACKEND_ALIASES: dict[str, str] = {
    "memory": "streams.backends.memory.InMemoryStreamManager",
    "redis": "streams.backends.redis.RedisStreamManager",
}
EXECUTORS = ("inprocess", "celery")

DEFAULTS: dict[str, Any] = {
    "STREAMS": {"BACKEND": "memory", "OPTIONS": {}},
    "EXECUTOR": "inprocess",
    "CELERY_QUEUE": "helix",
    "AGENT_MODULES": [],
    "DEFAULT_AGENT": "chat",
    "LLM": {},
    "SCRIPTED_DELAY_MS": "20-40",
    "AUTHENTICATION_CLASSES": None,
    "PERMISSION_CLASSES": None,
    "THROTTLE_CLASSES": None,
    "THROTTLE_RATES": {"helix_chat": "30/minute"},
    "THROTTLE_CACHE": None,
    "ALLOW_ANONYMOUS": False,
    "OVERRIDE_PERMISSION_CLASSES": [],
    "SSE_KEEPALIVE_SECONDS": 15.0,
    "SLOW_CLIENT_TIMEOUT_SECONDS": 30.0,
    "MAX_STREAMS_PER_CALLER": 16,
    "MAX_MESSAGE_CHARS": 20_000,
    "MAX_MESSAGES": 500,
    "MAX_BODY_BYTES": 1_048_576,
    "SERVER_MAX_BODY_BYTES": 10_485_760,
    "SERVER_HEADER_TIMEOUT_SECONDS": 10.0,
    "CONTENT_REPLAY": True,
    "DOUBLE_TEXTING": "reattach",
    "DOUBLE_TEXTING_WAIT_SECONDS": 30.0,
    "RUN_TIME_LIMIT_SECONDS": 1800,
    "LEASE_SECONDS": 4.0,
    "HEARTBEAT_SECONDS": 1.0,
    "MAX_ATTEMPTS": 3,
    "REAP_INTERVAL_SECONDS": 1.0,
    "APPROVAL_TTL_SECONDS": 86_400,
}


class HelixSettings:
    """Attribute access to ``settings.HELIX`` merged over :data:`DEFAULTS` (one level deep)."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] | None = None

    @property
    def user_settings(self) -> dict[str, Any]:
        value = getattr(settings, "HELIX", {})
        return value if isinstance(value, dict) else {}

    def as_dict(self) -> dict[str, Any]:
        if self._cache is None:
            merged = copy.deepcopy(DEFAULTS)
            for key, value in self.user_settings.items():
                if isinstance(merged.get(key), dict) and isinstance(value, dict):
                    merged[key] = {**merged[key], **value}
                else:
                    merged[key] = value
            self._cache = merged
        return self._cache

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            value = self.as_dict()[name]
        except KeyError:
            raise AttributeError(f"Unknown Helix setting {name!r}") from None
        # Kept as an attribute, found from now on without this call: every request reads a few.
        self.__dict__[name] = value
        return value

    def reload(self) -> None:
        for name in [name for name in self.__dict__ if not name.startswith("_")]:
            del self.__dict__[name]
        self._cache = None


helix_settings = HelixSettings()


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "HELIX":
        helix_settings.reload()


setting_changed.connect(_reload)
