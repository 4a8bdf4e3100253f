"""Waiting for a run's outcome gives way to a cancel, even one that comes in the turn of the loop
in which the run ends (Python 3.11's ``asyncio.wait_for`` would return the outcome instead)."""

from __future__ import annotations

import asyncio

import pytest

from workers.executors import RunHandle
from workers.runtime.persistence import RunOutcome


async def test_a_wait_cancelled_as_the_run_ends_is_cancelled() -> None:
    ended: asyncio.Future[RunOutcome | None] = asyncio.get_running_loop().create_future()
    handle = RunHandle("run-1", "s-1", 0, "m-1", _result=ended)
    waiting = asyncio.ensure_future(handle.result(timeout=30))
    await asyncio.sleep(0)
    ended.set_result(RunOutcome("completed"))
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_a_wait_for_a_run_that_does_not_end_times_out() -> None:
    handle = RunHandle("run-1", "s-1", 0, "m-1", _result=asyncio.get_running_loop().create_future())
    with pytest.raises(TimeoutError):
        await handle.result(timeout=0.05)


async def test_the_outcome_of_a_run_that_ends_is_returned() -> None:
    ended: asyncio.Future[RunOutcome | None] = asyncio.get_running_loop().create_future()
    handle = RunHandle("run-1", "s-1", 0, "m-1", _result=ended)
    waiting = asyncio.ensure_future(handle.result(timeout=30))
    ended.set_result(None)  # another attempt took the run over
    assert (await waiting).status == "superseded"
