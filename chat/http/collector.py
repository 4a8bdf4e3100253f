"""The cyclic collector held off while resumes are being set up.

A resume takes a few milliseconds from its request to its first bytes, most of them waiting on
the database and Redis, and meanwhile its request, view, DRF request, futures and tasks are all
alive. In a reconnect storm thousands are set up at once, so each young collection CPython makes
walks thousands of half-made requests, promotes them, and walks them again in an older
generation before they go: a tenth of a storm's CPU on one server process (``bench/storm.py``).
Their objects are freed by reference counting as soon as a set-up is done; collecting cycles can
wait until then.

A :class:`SetUp` is one resume's set-up, from its request to its first bytes sent. While any is
under way, automatic collection is off (if it was on); it comes back on when the last one ends,
and CPython then collects as it would have. A storm that goes on and on is not a way around the
collector: once it tracks :data:`MOST_DEFERRED` more objects than it has collected, a young
collection is made anyway, as the next set-up starts (an older one when it is due, the oldest
too: under a load whose set-ups never all end, nothing else collects). A process whose collector
is off (``gc.disable()``) stays as it is.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["MOST_DEFERRED", "SetUp"]

#: How many more objects the collector tracks than it has collected before a young collection
#: is made during set-ups anyway (CPython's own default threshold is 700).
MOST_DEFERRED = 1_000_000

_lock = threading.Lock()
_under_way = 0
_paused = False  # this module turned automatic collection off


def _enter() -> None:
    global _under_way, _paused
    with _lock:
        if _under_way == 0:
            if gc.isenabled():
                gc.disable()
                _paused = True
        elif _paused and gc.get_count()[0] > MOST_DEFERRED:
            gc.collect(_due())
        _under_way += 1


def _due() -> int:
    """The oldest generation whose count is past its threshold, as CPython picks it (without its
    rule that waits for a quarter of the oldest generation to be new: these collections are rare,
    and under a load that never lets set-ups end they are the only ones)."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    if counts[1] >= thresholds[1]:
        return 2 if counts[2] >= thresholds[2] else 1
    return 0


def _leave() -> None:
    global _under_way, _paused
    with _lock:
        _under_way -= 1
        if _under_way == 0 and _paused:
            _paused = False
            gc.enable()


class SetUp:
    """One set-up under way from its making until :meth:`end`: automatic collection is held off
    until it and every other set-up under way have ended."""

    __slots__ = ("_ended",)

    def __init__(self) -> None:
        _enter()
        self._ended = False

    def end(self) -> None:
        """This set-up is done (once; later calls do nothing)."""
        if not self._ended:
            self._ended = True
            _leave()
