"""The cyclic collector waits while resumes are set up, and comes back as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from chat.http import collector
from chat.http.collector import SetUp


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    assert collector._under_way == 0, "a set-up was left under way"
    gc.enable() if was else gc.disable()


def test_collection_is_off_until_the_last_set_up_ends() -> None:
    first = SetUp()
    assert not gc.isenabled()
    second = SetUp()
    first.end()
    assert not gc.isenabled()  # the second is still under way
    second.end()
    assert gc.isenabled()


def test_ending_twice_ends_once() -> None:
    first, second = SetUp(), SetUp()
    first.end()
    first.end()  # must not end the second's hold too
    assert not gc.isenabled()
    second.end()
    assert gc.isenabled()


def test_a_process_whose_collector_is_off_keeps_it_off() -> None:
    gc.disable()
    set_up = SetUp()
    set_up.end()
    assert not gc.isenabled()


def test_a_long_storm_still_collects_once_it_tracks_too_much(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector, "MOST_DEFERRED", 1_000)
    collections: list[int] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        first = SetUp()
        cycles = []
        for _ in range(2_000):  # tracked objects the collector has not seen: a cycle among them
            cycle: list[Any] = []
            cycle.append(cycle)
            cycles.append(cycle)
        del cycle, cycles
        assert collections == []  # nothing collects while set-ups are under way ...
        second = SetUp()  # ... until one starts past the bound
        assert collections and max(collections) <= 1
        assert not gc.isenabled()
        second.end()
        first.end()
    finally:
        gc.callbacks.remove(seen)
    assert gc.isenabled()


@pytest.mark.parametrize(
    ("counts", "generation"),
    [((2_000_000, 3, 0), 0), ((2_000_000, 10, 4), 1), ((2_000_000, 10, 10), 2)],
)
def test_under_a_load_that_never_ends_its_set_ups_every_generation_is_collected_when_due(
    monkeypatch: pytest.MonkeyPatch, counts: tuple[int, int, int], generation: int
) -> None:
    made: list[int] = []

    def collect(generation: int = 2) -> int:
        made.append(generation)
        return 0

    monkeypatch.setattr(gc, "get_threshold", lambda: (5_000, 10, 10))
    monkeypatch.setattr(gc, "collect", collect)
    first = SetUp()
    monkeypatch.setattr(gc, "get_count", lambda: counts)
    second = SetUp()
    second.end()
    first.end()
    assert made == [generation]
