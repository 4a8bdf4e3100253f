"""What Helix's endpoints need of the ASGI server around Django, and nothing more.

Every request, Helix's included, is Django's: its handler, the site's middleware, the URLconf.
A site wraps its application once to give Helix's endpoints three limits Django's handler does
not apply::

    application = HelixLimits(get_asgi_application())

* **A body cap before anything is read.** Django reads (and spools) a request's whole body before
  any middleware or view runs. A request to one of Helix's URLs whose body passes
  ``HELIX["MAX_BODY_BYTES"]`` (by its ``Content-Length``, else as it arrives), whatever its
  method, is answered ``413 PAYLOAD_TOO_LARGE`` with ``Connection: close`` here, and Django never
  sees it.
* **Backpressure**: a stream's writes wait while the client's socket is full, so a slow reader
  slows its own stream instead of growing the server's memory (:mod:`chat.http.flow_control`).
* **A stall bound**: a client that reads nothing for ``HELIX["SLOW_CLIENT_TIMEOUT_SECONDS"]`` is
  disconnected; it resumes from its last event id when it comes back.
* **No thread per open stream.** Django's handler gives every request a thread of its own for
  its thread-sensitive work (the site's sync middleware, ``request_started``) and keeps it until
  the request ends: for a stream, minutes, and in a reconnect storm thousands of threads at once.
  A request to Helix's URLs does that work on one of :data:`SHARED_THREADS` threads instead,
  through asgiref's ``ThreadSensitiveContext(executor=…)``; one thread-sensitive call at a time on
  each, as Django's own per-request thread runs them.

Helix's URLs are those under the prefixes where the site's root URLconf includes ``chat.urls``,
found once. Every other request of the site passes through untouched: the same ``receive`` and
``send``. Under Daphne, :mod:`chat.http.daphne_limits` is the server-side opt-in that caps every
body of the site before Twisted buffers it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.urls import URLPattern, URLResolver, get_resolver

from chat.http.body_limit import capped_receive
from chat.http.flow_control import flow_controlled
from streams.conf import helix_settings

__all__ = ["HelixLimits", "helix_prefixes"]

HELIX_URLCONF = "chat.urls"
#: Threads that the thread-sensitive work of Helix's requests shares, one call at a time each.
SHARED_THREADS = 4


def _includes(patterns: list[Any], prefix: str) -> Iterator[str]:
    for entry in patterns:
        if isinstance(entry, URLPattern):
            continue
        assert isinstance(entry, URLResolver)
        # Group names would clash between includes, and only the match matters here.
        regex = re.sub(r"\(\?P<\w+>", "(?:", entry.pattern.regex.pattern.removeprefix("^"))
        if getattr(entry.urlconf_module, "__name__", entry.urlconf_name) == HELIX_URLCONF:
            yield prefix + regex
        else:
            yield from _includes(entry.url_patterns, prefix + regex)


def helix_prefixes(urlconf: str | None = None) -> re.Pattern[str] | None:
    """One pattern matching the paths under every prefix where ``urlconf`` (the site's root
    URLconf by default) includes ``chat.urls``; ``None`` when it includes it nowhere."""
    found = list(_includes(get_resolver(urlconf).url_patterns, ""))
    if not found:
        return None
    return re.compile("/(?:" + "|".join(f"(?:{p})" for p in found) + ")")


class HelixLimits:
    """ASGI: the body cap, backpressure and stall bound of Helix's endpoints around ``app``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._prefixes: re.Pattern[str] | bool | None = False  # False: not looked up yet
        executors = [ThreadPoolExecutor(max_workers=1, thread_name_prefix="helix-sync") for _ in range(SHARED_THREADS)]
        self._executors = itertools.cycle(executors)

    def is_helix(self, scope: dict[str, Any]) -> bool:
        """Whether the request of ``scope`` is for one of Helix's URLs."""
        if self._prefixes is False:
            self._prefixes = helix_prefixes()  # once the URLconf can be imported
        prefixes = self._prefixes
        if prefixes is None or prefixes is True:
            return False
        path: str = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        return prefixes.match(path) is not None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.is_helix(scope):
            await self.app(scope, receive, send)
            return
        send = flow_controlled(send, stall_timeout=float(helix_settings.SLOW_CLIENT_TIMEOUT_SECONDS))
        capped = await capped_receive(scope, receive, send, int(helix_settings.MAX_BODY_BYTES))
        if capped is not None:
            # Django's own ThreadSensitiveContext, inside, then uses this one's thread.
            async with ThreadSensitiveContext(executor=next(self._executors)):
                await self.app(scope, capped, send)
