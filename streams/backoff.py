"""Backoff between retries: the one schedule behind every retry loop of the project.

A :class:`Backoff` hands out the delays to wait between attempts: ``initial``, then ``factor``
times the previous one, at most ``cap``, each spread by ``jitter`` so that clients failing
together do not retry in step. It is exhausted after ``attempts`` waits, or when the next wait
would end past ``timeout`` seconds from its creation (or its last :meth:`~Backoff.reset`): a loop
never sleeps only to give up afterwards. Waiting is asynchronous (:meth:`~Backoff.wait`) or, for
code on a worker thread, blocking (:meth:`~Backoff.wait_sync`); :func:`retry` is the common loop
built on it. What to retry, what to log and what to do on giving up stay with each loop.

The clock and the random source are parameters, so the schedule is tested without sleeping.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["Backoff", "retry"]

T = TypeVar("T")


class Backoff:
    """Successive delays between retries: exponential, capped, jittered, bounded by count or time.

    ``cap=None`` lets delays grow without bound; ``jitter`` is the relative spread of a delay
    (``1.0``: anywhere from half to one and a half times it); ``attempts`` and ``timeout`` bound
    the number of waits and the time since the first attempt (``None``: no bound).
    """

    def __init__(
        self,
        *,
        initial: float = 0.05,
        factor: float = 2.0,
        cap: float | None = 1.0,
        jitter: float = 0.0,
        attempts: int | None = None,
        timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.initial = initial
        self.factor = factor
        self.cap = cap
        self.jitter = jitter
        self.attempts = attempts
        self.timeout = timeout
        self._clock = clock
        self._rng = rng
        self.reset()

    def reset(self) -> None:
        """Start over: the first delay again, and a new deadline from now."""
        self.waits = 0
        self._delay = self.initial
        self._deadline = None if self.timeout is None else self._clock() + self.timeout

    def next_delay(self) -> float | None:
        """The delay to wait before the next attempt, or ``None`` when it is time to give up."""
        if self.attempts is not None and self.waits >= self.attempts:
            return None
        delay = self._delay
        if self.jitter:
            delay *= 1 + self.jitter * (self._rng() - 0.5)
        if self._deadline is not None and self._clock() + delay > self._deadline:
            return None
        self.waits += 1
        self._delay *= self.factor
        if self.cap is not None:
            self._delay = min(self._delay, self.cap)
        return delay

    async def wait(self) -> bool:
        """Sleep until the next attempt; ``False`` (at once) when it is time to give up."""
        delay = self.next_delay()
        if delay is None:
            return False
        await asyncio.sleep(delay)
        return True

    def wait_sync(self) -> bool:
        """:meth:`wait` for code on a thread of its own: blocks instead of yielding to a loop."""
        delay = self.next_delay()
        if delay is None:
            return False
        time.sleep(delay)
        return True


async def retry(
    action: Callable[[], Awaitable[T]],
    retry_on: type[BaseException] | tuple[type[BaseException], ...],
    backoff: Backoff,
) -> T:
    """Await ``action()`` until it succeeds, waiting ``backoff`` after each ``retry_on`` error.

    When the backoff is exhausted the last error propagates; any other error at once.
    """
    while True:
        try:
            return await action()
        except retry_on:
            if not await backoff.wait():
                raise
