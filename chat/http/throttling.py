"""The chat POST rate limit, as DRF throttling on a cache every web process shares.

:class:`ChatPostThrottle` counts the chat POSTs of each caller (the user, or an anonymous
visitor's address) at the rate ``HELIX["THROTTLE_RATES"]["helix_chat"]`` (or
``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["helix_chat"]``). A visitor's address is
``REMOTE_ADDR``; only behind ``REST_FRAMEWORK["NUM_PROXIES"]`` proxies is it read from
``X-Forwarded-For``, as DRF reads it (that many entries from the right), so neither a new session
nor a forged header gives a visitor a fresh count. Its counters live in the cache
``HELIX["THROTTLE_CACHE"]`` names; when that is unset and the streams are in Redis, in Django's
Redis cache on the stream store's server, so a limit holds across every web process, not per
process. Sites replace or extend it with ``HELIX["THROTTLE_CLASSES"]`` like any DRF throttle.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.core.cache import BaseCache, cache, caches
from django.core.cache.backends.redis import RedisCache
from django.core.signals import setting_changed
from redis.exceptions import RedisError
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from streams.conf import helix_settings
from streams.exceptions import StreamUnavailableError

logger = logging.getLogger(__name__)

__all__ = ["ChatPostThrottle", "throttle_cache"]

_lock = threading.Lock()
_redis_caches: dict[tuple[str, str], BaseCache] = {}


def throttle_cache() -> BaseCache:
    """The cache throttles count in: the named alias, else the stream Redis, else the default."""
    alias = helix_settings.THROTTLE_CACHE
    if alias:
        return caches[str(alias)]
    streams = helix_settings.STREAMS
    options = (streams.get("OPTIONS") or {}) if isinstance(streams, dict) else {}
    url = options.get("url")
    if isinstance(streams, dict) and streams.get("BACKEND") == "redis" and url:
        # Beside the streams, under their key prefix: sites sharing a Redis keep their counters apart.
        prefix = f"{options.get('key_prefix', 'helix:stream:')}throttle"
        with _lock:
            if (url, prefix) not in _redis_caches:
                _redis_caches[(url, prefix)] = RedisCache(url, {"KEY_PREFIX": prefix})
            return _redis_caches[(url, prefix)]
    return cache


class ChatPostThrottle(SimpleRateThrottle):
    """Chat POSTs per caller; every other request passes."""

    scope = "helix_chat"

    def __init__(self) -> None:
        # One is made for every request, and only a chat POST is counted: this class looks up its
        # cache and rate when it counts one (a subclass, which may read them anywhere, at once).
        self._configured = False
        if type(self) is not ChatPostThrottle:
            self._configure()

    def _configure(self) -> None:
        if not self._configured:
            self._configured = True
            self.cache = throttle_cache()
            super().__init__()

    def get_rate(self) -> str | None:
        rates = helix_settings.THROTTLE_RATES or {}
        rate = rates[self.scope] if self.scope in rates else api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        return None if rate is None else str(rate)

    def allow_request(self, request: Any, view: Any) -> bool:
        if request.method != "POST" or not getattr(view, "throttled_post", False):
            return True
        self._configure()
        try:
            return super().allow_request(request, view)
        except RedisError as exc:  # its counters are out of reach: refuse, typed, rather than count nothing
            logger.warning("the chat rate limit's cache failed: %s: %s", type(exc).__name__, exc)
            raise StreamUnavailableError("-", "The rate limit's store is unavailable; try again shortly") from exc

    def get_cache_key(self, request: Any, view: Any) -> str:
        user = request.user
        ident = f"user:{user.pk}" if user is not None and user.is_authenticated else f"addr:{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def get_ident(self, request: Any) -> str:
        """The caller's address. ``X-Forwarded-For`` is the client's to write unless proxies the
        site names add to it, so without ``NUM_PROXIES`` it is ignored (DRF would use all of it)."""
        if api_settings.NUM_PROXIES is None:
            return str(request.META.get("REMOTE_ADDR", ""))
        return super().get_ident(request)


def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "HELIX":
        _redis_caches.clear()


setting_changed.connect(_reset)
