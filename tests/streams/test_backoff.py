"""The retry schedule: growth, cap, jitter, bounds by count and by time, and the retry loop.

A fake clock drives the deadlines and every delay that is actually slept is zero, so nothing here
waits for real.
"""

from __future__ import annotations

import itertools

import pytest

from streams.backoff import Backoff, retry


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def delays(backoff: Backoff, most: int = 50) -> list[float]:
    """The delays handed out until the backoff gives up (at most ``most``), without sleeping."""
    result: list[float] = []
    while len(result) < most and (delay := backoff.next_delay()) is not None:
        result.append(delay)
    return result


def test_delays_double_up_to_the_cap() -> None:
    assert delays(Backoff(), most=7) == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_without_a_cap_delays_keep_growing() -> None:
    assert delays(Backoff(initial=1.0, factor=3.0, cap=None), most=4) == [1.0, 3.0, 9.0, 27.0]


def test_attempts_bound_the_number_of_waits() -> None:
    backoff = Backoff(cap=None, attempts=3)
    assert delays(backoff) == pytest.approx([0.05, 0.1, 0.2])
    assert backoff.next_delay() is None  # exhausted stays exhausted
    assert Backoff(attempts=0).next_delay() is None


def test_a_timeout_never_starts_a_wait_that_ends_past_it() -> None:
    clock = Clock()
    backoff = Backoff(timeout=1.0, clock=clock)
    slept = []
    while (delay := backoff.next_delay()) is not None:
        slept.append(delay)
        clock.now += delay + 0.01  # the wait, then a failed attempt
        assert clock.now <= 100.0 + 1.0 + 0.01
    assert slept == pytest.approx([0.05, 0.1, 0.2, 0.4])  # 0.8 more would end at 1.59


def test_the_deadline_counts_from_creation_including_slow_attempts() -> None:
    clock = Clock()
    backoff = Backoff(timeout=1.0, clock=clock)
    clock.now += 0.97  # a first attempt that took its time before failing
    assert backoff.next_delay() is None


def test_reset_starts_the_delays_and_the_deadline_over() -> None:
    clock = Clock()
    backoff = Backoff(timeout=0.5, clock=clock)
    assert delays(backoff) == pytest.approx([0.05, 0.1, 0.2, 0.4])  # the clock stands still here
    clock.now += 10
    assert backoff.next_delay() is None
    backoff.reset()
    assert backoff.waits == 0
    assert delays(backoff) == pytest.approx([0.05, 0.1, 0.2, 0.4])


def test_jitter_spreads_each_delay_around_its_base_without_compounding() -> None:
    low = Backoff(initial=1.0, cap=None, jitter=1.0, rng=lambda: 0.0)
    assert delays(low, most=3) == pytest.approx([0.5, 1.0, 2.0])
    high = Backoff(initial=1.0, cap=None, jitter=0.5, rng=lambda: 1.0)
    assert delays(high, most=3) == pytest.approx([1.25, 2.5, 5.0])
    spread = itertools.cycle([0.0, 0.5, 1.0])
    assert delays(Backoff(initial=1.0, cap=4.0, jitter=1.0, rng=lambda: next(spread)), most=4) == pytest.approx(
        [0.5, 2.0, 6.0, 2.0]
    )


def test_the_provider_schedule_is_exponential_with_jitter_and_bounded_retries() -> None:
    # workers.llm.openai: backoff * 2**attempt * (0.5 + random()), max_retries times
    backoff = Backoff(initial=0.5, cap=None, jitter=1.0, attempts=3, rng=lambda: 0.25)
    assert delays(backoff) == pytest.approx([0.375, 0.75, 1.5])


async def test_wait_sleeps_the_delay_and_says_when_to_give_up() -> None:
    backoff = Backoff(initial=0.0, attempts=2)
    assert await backoff.wait()
    assert await backoff.wait()
    assert not await backoff.wait()
    assert backoff.waits == 2


def test_wait_sync_blocks_the_delay_and_says_when_to_give_up() -> None:
    backoff = Backoff(initial=0.0, attempts=1)
    assert backoff.wait_sync()
    assert not backoff.wait_sync()


async def test_retry_returns_once_the_action_succeeds() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError("down")
        return "up"

    backoff = Backoff(initial=0.0, attempts=5)
    assert await retry(flaky, ConnectionError, backoff) == "up"
    assert calls == 3 and backoff.waits == 2


async def test_retry_raises_the_last_error_when_the_backoff_is_exhausted() -> None:
    calls = 0

    async def down() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError(f"down {calls}")

    with pytest.raises(ConnectionError, match="down 4"):
        await retry(down, (TimeoutError, ConnectionError), Backoff(initial=0.0, attempts=3))
    assert calls == 4  # the first attempt and three retries


async def test_retry_gives_up_at_the_deadline() -> None:
    clock = Clock()
    calls = 0

    async def slow_failure() -> None:
        nonlocal calls
        calls += 1
        clock.now += 0.3
        raise ConnectionError

    # the delays are real but tiny; the fake clock says each attempt took 0.3 s
    with pytest.raises(ConnectionError):
        await retry(slow_failure, ConnectionError, Backoff(initial=0.001, timeout=1.0, clock=clock))
    assert calls == 4  # failures end at 0.3, 0.6, 0.9 and 1.2 s: no wait starts after 1.0 s


async def test_retry_lets_other_errors_through_at_once() -> None:
    backoff = Backoff(initial=0.0)

    async def broken() -> None:
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError):
        await retry(broken, ConnectionError, backoff)
    assert backoff.waits == 0
