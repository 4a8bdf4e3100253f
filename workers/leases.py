"""Leases: a worker process keeps the runs it executes alive with heartbeats.

Every run an attempt claims carries a lease (``HELIX["LEASE_SECONDS"]``). One :class:`LeaseKeeper`
per process and event loop renews the leases of all its runs every ``HEARTBEAT_SECONDS`` in one
database update, and, on a loop of its own, marks them alive in the stream store
(:meth:`~streams.backends.base.StreamManager.mark_alive`) in one round trip: a database stall
holds up the first, not the second, so the reaper does not mistake a stalled database for a dead
worker. A renewal the database held up is made again at once, since the expiry it wrote was
reckoned from before the stall. A run the keeper no longer holds (a reaper gave it to another worker after this
one stalled) is cancelled here; its writes were fenced off already. A run its user stopped
has its stop signal (:meth:`LeaseKeeper.stop_signal`) set within ``STOP_POLL_SECONDS``: the step
loop cancels the model call or tools it is in and records ``run_interrupted``. On a clean shutdown
the keeper hands its runs back (:meth:`LeaseKeeper.hand_back`) so another worker continues them
without counting an attempt.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field

from streams.backends.base import StreamManager
from streams.conf import helix_settings
from streams.exceptions import HelixError
from workers.runtime.persistence import RunRecorder

__all__ = ["LeaseKeeper", "lease_keeper", "worker_name"]

logger = logging.getLogger(__name__)


def worker_name() -> str:
    """This process's name on the runs it holds: host, pid and a random part (pids get reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class _Held:
    epoch: int
    task: asyncio.Task[object]
    stop: asyncio.Event = field(default_factory=asyncio.Event)


#: How often a keeper asks whether the users of its runs stopped them (one query for all).
STOP_POLL_SECONDS = 0.25


class LeaseKeeper:
    """Renews the leases of the runs this process executes (one keeper per event loop)."""

    def __init__(
        self,
        recorder: RunRecorder,
        *,
        lease_seconds: float,
        heartbeat_seconds: float,
        worker: str | None = None,
        streams: StreamManager | None = None,
    ) -> None:
        self.recorder = recorder
        self.streams = streams
        self.lease_seconds = lease_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.worker = worker or worker_name()
        self._held: dict[str, _Held] = {}
        self._beat: asyncio.Task[None] | None = None
        self._marks: asyncio.Task[None] | None = None
        self._stops: asyncio.Task[None] | None = None
        self.stop_poll_seconds = STOP_POLL_SECONDS

    def hold(self, run_id: str, epoch: int, task: asyncio.Task[object]) -> None:
        """Keep ``run_id`` leased while ``task`` (its attempt) runs."""
        self._held[run_id] = _Held(epoch, task)
        task.add_done_callback(lambda _: self._release(run_id, task))
        if self._beat is None or self._beat.done():
            self._beat = asyncio.ensure_future(self._heartbeats())
        if self.streams is not None and (self._marks is None or self._marks.done()):
            self._marks = asyncio.ensure_future(self._alive_marks(self.streams))
        if self._stops is None or self._stops.done():
            self._stops = asyncio.ensure_future(self._stop_polls())

    def _release(self, run_id: str, task: asyncio.Task[object]) -> None:
        held = self._held.get(run_id)
        if held is not None and held.task is task:
            del self._held[run_id]

    def stop_signal(self, run_id: str) -> asyncio.Event | None:
        """The event set when the user of held run ``run_id`` stops it (``None``: not held)."""
        held = self._held.get(run_id)
        return held.stop if held is not None else None

    @property
    def run_ids(self) -> list[str]:
        return list(self._held)

    async def _heartbeats(self) -> None:
        while self._held:
            await asyncio.sleep(self.heartbeat_seconds)
            started = time.monotonic()
            await self.beat()
            if time.monotonic() - started > self.heartbeat_seconds:  # held up: renew from now
                await self.beat()

    async def _alive_marks(self, streams: StreamManager) -> None:
        while self._held:
            try:
                await streams.mark_alive(self.run_ids, self.lease_seconds)
            except HelixError as exc:  # the store is away: the database lease still speaks for the runs
                logger.warning("could not mark %d runs alive in the stream store: %s", len(self._held), exc)
            await asyncio.sleep(self.heartbeat_seconds)

    async def _stop_polls(self) -> None:
        while self._held:
            await asyncio.sleep(self.stop_poll_seconds)
            await self.stop_stopped()

    async def stop_stopped(self) -> None:
        """Signal the attempts whose runs their users stopped (one query for all held runs)."""
        ids = [run_id for run_id, held in self._held.items() if not held.stop.is_set()]
        if not ids:
            return
        try:
            stopped = await self.recorder.stopped_runs(ids)
        except Exception:  # the database is away: the run loop's own checks remain
            logger.exception("could not ask whether %d runs were stopped", len(ids))
            return
        for run_id in stopped:
            held = self._held.get(run_id)
            if held is not None:
                held.stop.set()

    async def beat(self) -> None:
        """Renew every lease now; cancel the attempts whose run went to another worker."""
        ids = self.run_ids
        if not ids:
            return
        try:
            still = await self.recorder.renew_leases(self.worker, ids, self.lease_seconds)
        except Exception:  # the database is away: try again next beat, the lease has slack
            logger.exception("could not renew the leases of %d runs", len(ids))
            return
        for run_id in ids:
            held = self._held.get(run_id)
            if held is not None and run_id not in still:
                logger.warning("run %s was taken over by another worker: stopping this attempt", run_id)
                held.task.cancel()

    async def hand_back(self) -> list[str]:
        """Stop every attempt and queue its run again for another worker (a clean shutdown)."""
        held = list(self._held.items())
        for _, attempt in held:
            attempt.task.cancel()
        await asyncio.gather(*(attempt.task for _, attempt in held), return_exceptions=True)
        return [run_id for run_id, attempt in held if await self.recorder.release_run(run_id, attempt.epoch)]


def lease_keeper(recorder: RunRecorder, streams: StreamManager) -> LeaseKeeper:
    """A lease keeper with the configured lease and heartbeat (one per process and event loop)."""
    return LeaseKeeper(
        recorder,
        lease_seconds=float(helix_settings.LEASE_SECONDS),
        heartbeat_seconds=float(helix_settings.HEARTBEAT_SECONDS),
        streams=streams,
    )
