"""The lease keeper's rules, against a recorder and a stream store kept in memory: no database, no Redis."""

from __future__ import annotations

import asyncio
import os
import socket

from streams.backends.memory import InMemoryStreamManager
from streams.exceptions import StreamUnavailableError
from workers.leases import LeaseKeeper, worker_name


class LeaseBook:
    """The lease side of a recorder: which worker holds which run, and what was asked of it."""

    def __init__(self) -> None:
        self.holders: dict[str, str] = {}
        self.renewals: list[tuple[str, list[str], float]] = []
        self.released: list[tuple[str, int]] = []
        self.down = False

    async def renew_leases(self, worker: str, run_ids: list[str], lease_seconds: float) -> set[str]:
        if self.down:
            raise ConnectionError("the database is away")
        self.renewals.append((worker, sorted(run_ids), lease_seconds))
        return {run_id for run_id in run_ids if self.holders.get(run_id) == worker}

    async def release_run(self, run_id: str, epoch: int) -> bool:
        self.released.append((run_id, epoch))
        return self.holders.pop(run_id, None) is not None


def keeper(book: LeaseBook, heartbeat: float = 60.0) -> LeaseKeeper:
    return LeaseKeeper(book, lease_seconds=30.0, heartbeat_seconds=heartbeat, worker="w1")  # type: ignore[arg-type]


def attempt() -> asyncio.Task[object]:
    return asyncio.ensure_future(asyncio.sleep(3600))


async def settle(*tasks: asyncio.Task[object]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


def test_worker_names_say_host_and_process_and_never_repeat() -> None:
    first, second = worker_name(), worker_name()
    host, pid, _ = first.rsplit(":", 2)
    assert (host, pid) == (socket.gethostname(), str(os.getpid()))
    assert first != second


async def test_a_beat_renews_every_held_lease_in_one_call() -> None:
    book = LeaseBook()
    keep = keeper(book)
    a, b = attempt(), attempt()
    book.holders.update(r1="w1", r2="w1")
    keep.hold("r1", 1, a)
    keep.hold("r2", 4, b)
    await keep.beat()
    assert book.renewals == [("w1", ["r1", "r2"], 30.0)]
    assert not a.cancelled() and not b.cancelled()
    a.cancel(), b.cancel()
    await settle(a, b)


async def test_a_run_taken_over_elsewhere_has_its_attempt_cancelled() -> None:
    book = LeaseBook()
    keep = keeper(book)
    lost, kept = attempt(), attempt()
    book.holders.update(r1="w2", r2="w1")  # a reaper gave r1 to another worker
    keep.hold("r1", 1, lost)
    keep.hold("r2", 1, kept)
    await keep.beat()
    await settle(lost)
    assert lost.cancelled() and not kept.done()
    assert keep.run_ids == ["r2"]  # a finished attempt releases its run
    kept.cancel()
    await settle(kept)


async def test_an_unreachable_database_cancels_nothing_and_the_next_beat_tries_again() -> None:
    book = LeaseBook()
    keep = keeper(book)
    task = attempt()
    book.holders["r1"] = "w1"
    keep.hold("r1", 1, task)
    book.down = True
    await keep.beat()
    assert not task.done() and book.renewals == []
    book.down = False
    await keep.beat()
    assert book.renewals == [("w1", ["r1"], 30.0)] and not task.done()
    task.cancel()
    await settle(task)


async def test_nothing_held_asks_nothing() -> None:
    book = LeaseBook()
    await keeper(book).beat()
    assert book.renewals == []


async def test_heartbeats_run_while_runs_are_held_and_stop_after() -> None:
    book = LeaseBook()
    keep = keeper(book, heartbeat=0.01)
    task = attempt()
    book.holders["r1"] = "w1"
    keep.hold("r1", 1, task)
    while len(book.renewals) < 2:
        await asyncio.sleep(0.01)
    task.cancel()
    await settle(task)
    await asyncio.sleep(0.05)
    renewed = len(book.renewals)
    await asyncio.sleep(0.05)
    assert keep.run_ids == [] and len(book.renewals) == renewed


async def test_an_earlier_attempt_ending_does_not_release_a_later_hold() -> None:
    book = LeaseBook()
    keep = keeper(book)
    first, second = attempt(), attempt()
    keep.hold("r1", 1, first)
    keep.hold("r1", 2, second)  # the same run, claimed again by this process
    first.cancel()
    await settle(first)
    assert keep.run_ids == ["r1"]
    second.cancel()
    await settle(second)
    assert keep.run_ids == []


async def test_hand_back_stops_every_attempt_and_returns_the_runs_released() -> None:
    book = LeaseBook()
    keep = keeper(book)
    a, b = attempt(), attempt()
    book.holders["r1"] = "w1"  # r2's lease is gone already: nothing to hand back
    keep.hold("r1", 3, a)
    keep.hold("r2", 5, b)
    assert await keep.hand_back() == ["r1"]
    assert a.cancelled() and b.cancelled()
    assert sorted(book.released) == [("r1", 3), ("r2", 5)]


class StalledBook(LeaseBook):
    """A database whose renewals hang until ``release`` is set (an exclusive lock, a stall)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.release.set()

    async def renew_leases(self, worker: str, run_ids: list[str], lease_seconds: float) -> set[str]:
        await self.release.wait()
        return await super().renew_leases(worker, run_ids, lease_seconds)


async def test_a_database_stall_does_not_stop_the_marks_in_the_stream_store() -> None:
    book, streams = StalledBook(), InMemoryStreamManager()
    keep = LeaseKeeper(book, lease_seconds=0.2, heartbeat_seconds=0.02, worker="w1", streams=streams)  # type: ignore[arg-type]
    task = attempt()
    book.holders["r1"] = "w1"
    book.release.clear()  # the database stalls before the first renewal
    keep.hold("r1", 1, task)
    await asyncio.sleep(0.5)  # past two leases: the database lease would have expired
    assert book.renewals == []
    assert await streams.alive(["r1", "r2"]) == {"r1"}
    book.release.set()
    while len(book.renewals) < 2:
        await asyncio.sleep(0.01)
    # The renewal the stall held up is made again at once: its expiry was reckoned from before it.
    assert book.renewals[:2] == [("w1", ["r1"], 0.2)] * 2
    task.cancel()
    await settle(task)
    await asyncio.sleep(0.3)
    assert await streams.alive(["r1"]) == set()  # a finished attempt's mark lapses


async def test_a_stream_store_that_is_away_leaves_the_database_lease_speaking() -> None:
    book, streams = LeaseBook(), InMemoryStreamManager()

    async def away(run_ids: list[str], seconds: float) -> None:
        raise StreamUnavailableError("-", "Redis unreachable")

    streams.mark_alive = away  # type: ignore[method-assign]
    keep = LeaseKeeper(book, lease_seconds=30, heartbeat_seconds=0.01, worker="w1", streams=streams)  # type: ignore[arg-type]
    task = attempt()
    book.holders["r1"] = "w1"
    keep.hold("r1", 1, task)
    while len(book.renewals) < 3:
        await asyncio.sleep(0.01)
    assert not task.done()
    task.cancel()
    await settle(task)
