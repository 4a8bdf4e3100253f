"""Executors: how a run gets executed, in the web process or on a Celery worker.

Both start a run the same way (:func:`start_run`): the session is created on first use, the
``messages``/``state`` overrides applied, the user message stored, and a Run recorded with the
stream sequence before its first chunk (``start_sequence``). Then the in-process executor runs
the agent as an asyncio task of the current loop, and the Celery executor enqueues one task per
run. A second execution on a session with a run in flight raises
:class:`~workers.exceptions.RunConflictError`.

Every execution is an *attempt* (:func:`execute_run`): it claims the run with a new fencing
epoch and a lease that its process's :class:`~workers.leases.LeaseKeeper` renews. An attempt
that takes over from a dead one (:func:`take_over`) voids the dead one's partial step, tells
readers to resync, and continues after the last committed step.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

from streams.backends.base import StreamManager
from streams.conf import helix_settings
from streams.exceptions import StreamSupersededError
from streams.messages import StoredMessage
from streams.protocol import ExecutorSuperseded, StepDiscarded, StreamResync
from workers.exceptions import as_run_error
from workers.leases import LeaseKeeper
from workers.runtime.agents import Agent, get_agent
from workers.runtime.persistence import RunClaim, RunOutcome, RunRecorder
from workers.runtime.steps import RunLoop, report_failure
from workers.runtime.writer import RunWriter

__all__ = [
    "CeleryExecutor",
    "Executor",
    "InProcessExecutor",
    "RunHandle",
    "execute_run",
    "lease_keeper",
    "start_run",
    "take_over",
]

logger = logging.getLogger(__name__)


@dataclass
class RunHandle:
    """A started run: ids and start sequence now, its outcome through :meth:`result`."""

    run_id: str
    session_id: str
    start_sequence: int
    message_id: str
    _result: asyncio.Future[RunOutcome | None] | None = field(default=None, repr=False)
    _poll: Any = field(default=None, repr=False)

    async def result(self, timeout: float | None = None) -> RunOutcome:
        """Wait for the run to end."""
        if self._result is not None:
            outcome = await asyncio.wait_for(asyncio.shield(self._result), timeout)
            return outcome or RunOutcome("superseded")  # another attempt owns the run now
        return await asyncio.wait_for(self._poll(), timeout)


async def start_run(
    recorder: RunRecorder,
    streams: StreamManager,
    agent: Agent,
    message: str | StoredMessage | None,
    *,
    session_id: str | None = None,
    messages: list[StoredMessage] | None = None,
    state: dict[str, Any] | None = None,
    message_id: str | None = None,
    owner_id: int | None = None,
) -> RunHandle:
    """Record a new run of ``agent`` on ``session_id`` (a new session when ``None``)."""
    session_id = session_id or str(uuid.uuid4())
    message_id = message_id or f"msg-{uuid.uuid4().hex}"
    user = (
        StoredMessage(role="user", content=message, id=f"user-{uuid.uuid4().hex[:16]}")
        if isinstance(message, str)
        else message
    )
    info = await streams.get_stream_info(session_id)
    start_sequence = info.latest_sequence if info is not None else 0
    run_id = await recorder.start_run(
        session_id,
        agent.name,
        user_message=user,
        messages=messages,
        state=state,
        start_sequence=start_sequence,
        message_id=message_id,
        owner_id=owner_id,
    )
    if info is not None and info.status != "active":
        await streams.reopen_stream(session_id)  # the session's next run: sequences continue
    await streams.create_writer(session_id, run_id, agent.name)
    return RunHandle(run_id, session_id, start_sequence, message_id)


def lease_keeper(recorder: RunRecorder) -> LeaseKeeper:
    """A lease keeper with the configured lease and heartbeat (one per process and event loop)."""
    return LeaseKeeper(
        recorder,
        lease_seconds=float(helix_settings.LEASE_SECONDS),
        heartbeat_seconds=float(helix_settings.HEARTBEAT_SECONDS),
    )


async def execute_run(
    recorder: RunRecorder, streams: StreamManager, run_id: str, keeper: LeaseKeeper, agent: Agent | None = None
) -> RunOutcome | None:
    """Claim ``run_id`` for a new attempt and run it to its end: the agent loop, the outcome
    recorded, the stream closed, every write fenced by the attempt's epoch. The run's agent is
    looked up by name unless given (an agent defined without registering it).

    ``None`` when there was nothing to claim (finished, or held by a live attempt) or when a
    newer attempt superseded this one midway (then it leaves everything to that one).
    """
    claim = await recorder.claim_run(run_id, keeper.worker, keeper.lease_seconds)
    if claim is None:
        return None
    task = asyncio.current_task()
    assert task is not None
    keeper.hold(run_id, claim.epoch, task)
    try:
        return await _attempt(recorder, streams, claim, agent)
    except StreamSupersededError as exc:  # the stream's fence, or the database's (RunSupersededError)
        logger.warning("attempt %d of run %s was superseded: %s", claim.attempt, run_id, exc)
        return None


async def _attempt(recorder: RunRecorder, streams: StreamManager, claim: RunClaim, given: Agent | None) -> RunOutcome:
    session_id, epoch = claim.session_id, claim.epoch
    if claim.takeover:
        await take_over(streams, claim)
    else:
        await streams.fence(session_id, epoch)
    if claim.waiting:  # died after committing a pause, before recording it: just pause again
        outcome = RunOutcome("paused")
        await recorder.finish_run(claim.run_id, outcome, epoch=epoch)
        await streams.pause_stream(session_id, epoch=epoch)
        return outcome
    try:
        agent = given if given is not None and given.name == claim.agent else get_agent(claim.agent)
    except Exception as exc:
        writer = RunWriter(await streams.create_writer(session_id, claim.run_id, claim.agent, epoch=epoch))
        outcome = await report_failure(writer, as_run_error(exc), step=0, usage={})
    else:
        loop = RunLoop(
            agent, session_id=session_id, run_id=claim.run_id, streams=streams, recorder=recorder, epoch=epoch
        )
        outcome = await loop.run(message_id=claim.message_id, first_step=claim.step_count + 1)
    await recorder.finish_run(claim.run_id, outcome, epoch=epoch)
    if outcome.status == "failed":
        await streams.fail_stream(session_id, outcome.error_message or outcome.error_code, epoch=epoch)
    elif outcome.status == "paused":
        await streams.pause_stream(session_id, epoch=epoch)
    else:
        await streams.end_stream(session_id, output=outcome.output, epoch=epoch)
    return outcome


async def take_over(streams: StreamManager, claim: RunClaim) -> None:
    """Start attempt ``claim`` where the last one left off: fence the stream, void the partial
    step the dead attempt was in (``step_discarded``), and tell readers to resync."""
    latest = await streams.fence(claim.session_id, claim.epoch)
    floor = claim.checkpoint_sequence if claim.checkpoint_sequence is not None else claim.start_sequence
    step = claim.step_count + 1
    partial = await streams.get_chunks_from_step(claim.session_id, step, min_sequence=floor)
    writer = RunWriter(await streams.create_writer(claim.session_id, claim.run_id, claim.agent, epoch=claim.epoch))
    if claim.previous_epoch:
        await writer.emit(
            ExecutorSuperseded, run_id=claim.run_id, epoch=claim.previous_epoch, current_epoch=claim.epoch
        )
    last_good = latest
    if partial:
        last_good = partial[0][1] - 1
        await writer.emit(
            StepDiscarded,
            run_id=claim.run_id,
            step=step,
            attempt=claim.attempt,
            from_sequence=partial[0][1],
            to_sequence=latest,
            reason=claim.reason,
        )
    await writer.emit(
        StreamResync,
        run_id=claim.run_id,
        reason=claim.reason,
        attempt=claim.attempt,
        checkpoint_id=claim.checkpoint_id,
        last_good_sequence=last_good,
    )
    logger.info(
        "run %s: attempt %d (epoch %d) takes over after step %d (%s)",
        claim.run_id,
        claim.attempt,
        claim.epoch,
        claim.step_count,
        claim.reason,
    )


class Executor(abc.ABC):
    """Starts runs; ``execute`` returns once the run is recorded and its stream exists."""

    poll_interval = 0.2

    def __init__(self, recorder: RunRecorder, streams: StreamManager) -> None:
        self.recorder = recorder
        self.streams = streams

    async def execute(
        self,
        agent: Agent | str,
        message: str | StoredMessage | None,
        session_id: str | None = None,
        messages: list[StoredMessage] | None = None,
        state: dict[str, Any] | None = None,
        *,
        message_id: str | None = None,
        owner_id: int | None = None,
    ) -> RunHandle:
        """Start a run of ``agent`` for ``message`` (see :func:`start_run`) and launch it."""
        resolved = get_agent(agent) if isinstance(agent, str) else agent
        handle = await start_run(
            self.recorder,
            self.streams,
            resolved,
            message,
            session_id=session_id,
            messages=messages,
            state=state,
            message_id=message_id,
            owner_id=owner_id,
        )
        task = await self._dispatch(handle.run_id, resolved)
        if task is not None:
            handle._result = task
        else:
            handle._poll = lambda: self._poll(handle.run_id)
        return handle

    async def resume(self, run_id: str, agent: Agent | str) -> None:
        """Continue ``run_id``, paused until its tool calls were answered (they now are)."""
        await self._dispatch(run_id, get_agent(agent) if isinstance(agent, str) else agent)

    async def _poll(self, run_id: str) -> RunOutcome:
        while True:
            status = await self.recorder.run_status(run_id)
            if status in ("completed", "failed", "interrupted", "paused"):
                return RunOutcome(status)
            await asyncio.sleep(self.poll_interval)

    @abc.abstractmethod
    async def _dispatch(self, run_id: str, agent: Agent) -> asyncio.Task[RunOutcome | None] | None:
        """Get an attempt at the recorded run started; its task when it runs in this process."""


class InProcessExecutor(Executor):
    """Runs agents as asyncio tasks of the running loop (the embedded default)."""

    def __init__(self, recorder: RunRecorder, streams: StreamManager) -> None:
        super().__init__(recorder, streams)
        self._tasks: set[asyncio.Task[RunOutcome | None]] = set()
        self._keepers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LeaseKeeper] = weakref.WeakKeyDictionary()

    async def _dispatch(self, run_id: str, agent: Agent) -> asyncio.Task[RunOutcome | None]:
        loop = asyncio.get_running_loop()
        keeper = self._keepers.get(loop)
        if keeper is None:
            keeper = self._keepers[loop] = lease_keeper(self.recorder)
        task = loop.create_task(execute_run(self.recorder, self.streams, run_id, keeper, agent))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


RUN_TASK = "helix.run_agent"


class CeleryExecutor(Executor):
    """Enqueues one Celery task per run (the ``helix.run_agent`` task, sent by name)."""

    def __init__(
        self, recorder: RunRecorder, streams: StreamManager, *, queue: str | None = None, poll_interval: float = 0.2
    ) -> None:
        super().__init__(recorder, streams)
        self.queue = queue
        self.poll_interval = poll_interval

    async def _dispatch(self, run_id: str, agent: Agent) -> None:
        from asgiref.sync import sync_to_async
        from celery import current_app

        options = {"queue": self.queue} if self.queue else {}
        await sync_to_async(current_app.send_task, thread_sensitive=False)(RUN_TASK, args=[run_id], **options)
