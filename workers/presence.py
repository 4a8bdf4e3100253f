"""Which queues have a live worker: each worker process says, every few seconds, which of Helix's
queues it consumes, and a web process asks before it records a run it would send to one.

A worker started the usual way of a site's own Celery app (no ``-Q helix``) consumes the site's
default queue only, and a run sent to Helix's queue would wait there, its chat spinning, until
the reaper gave up on it. With presence, such a POST is refused at once with ``503
EXECUTOR_UNAVAILABLE`` and ``Retry-After``, before anything is stored, and the web process logs
why.

Presence lives in the broker's Redis (every web process and worker shares it by definition): a
sorted set per queue, ``helix:workers:<queue>``, of worker names scored by the time of their last
word. A worker that has said nothing for :data:`PRESENCE_SECONDS` is gone. Under a broker that is
not Redis there is no presence, and nothing is refused.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

import redis

__all__ = ["PRESENCE_SECONDS", "WorkerPresence"]

logger = logging.getLogger(__name__)

#: A worker silent this long no longer counts as listening.
PRESENCE_SECONDS = 10.0
#: How long a web process trusts a "someone listens" (a refusal is asked again every time).
LISTENING_CACHE_SECONDS = 2.0


class WorkerPresence:
    """Workers' presence on queues, in the Redis at ``url``."""

    def __init__(self, url: str, *, prefix: str = "helix:workers:", ttl: float = PRESENCE_SECONDS) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.prefix, self.ttl = prefix, ttl
        self._heard: dict[str, float] = {}

    def announce(self, queues: Iterable[str], worker: str) -> None:
        """``worker`` consumes ``queues`` now."""
        now = time.time()
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.zadd(self.prefix + queue, {worker: now})
                pipe.expire(self.prefix + queue, int(self.ttl * 3))
            pipe.execute()

    def withdraw(self, queues: Iterable[str], worker: str) -> None:
        """``worker`` stops consuming ``queues`` (a clean shutdown)."""
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.zrem(self.prefix + queue, worker)
            pipe.execute()

    def listening(self, queue: str) -> int:
        """How many workers said they consume ``queue`` within the last ``ttl`` seconds."""
        if time.monotonic() - self._heard.get(queue, float("-inf")) < LISTENING_CACHE_SECONDS:
            return 1
        key = self.prefix + queue
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zremrangebyscore(key, "-inf", time.time() - self.ttl)
            pipe.zcard(key)
            count = int(pipe.execute()[1])
        if count:
            self._heard[queue] = time.monotonic()
        return count

    def keep_announcing(self, queues: list[str], worker: str) -> threading.Event:
        """Announce ``worker`` on ``queues`` now and every third of ``ttl`` from a thread, until
        the returned event is set."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                try:
                    self.announce(queues, worker)
                except redis.RedisError as exc:  # the broker is away: the worker has more to worry about
                    logger.warning("could not announce worker %s on %s: %s", worker, ", ".join(queues), exc)
                stop.wait(self.ttl / 3)

        self.announce(queues, worker)
        threading.Thread(target=loop, name="helix-presence", daemon=True).start()
        return stop


def broker_presence(broker_url: str | None) -> WorkerPresence | None:
    """The presence of workers in the broker at ``broker_url``, or ``None`` for a broker that is
    not Redis."""
    if not broker_url or not broker_url.startswith(("redis://", "rediss://", "unix://")):
        return None
    return WorkerPresence(broker_url)
