"""Attempts: one execution of a run, from its claim to its recorded outcome.

An attempt (:func:`execute_run`) claims the run with a new fencing epoch and a lease that its
process's :class:`~workers.leases.LeaseKeeper` renews, runs the agent's step loop, records the
outcome and closes the stream, every write fenced by its epoch and made as its run's: the stream
refuses it once it is open for another run (a later run of the session, or the first run of a
session created again under the id after this one's was deleted). An attempt that takes over
from a dead one (:func:`take_over`) voids the dead one's partial step, tells readers to resync,
and continues after the last committed step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from streams.backends.base import StreamManager
from streams.backends.writers import StreamWriter
from streams.backoff import Backoff
from streams.exceptions import HelixError, StreamSupersededError, StreamUnavailableError
from streams.protocol import ExecutorSuperseded, StepDiscarded, StreamResync
from workers.exceptions import DatabaseUnavailableError, RunError, RunErrorCode, as_run_error
from workers.leases import LeaseKeeper
from workers.runtime.agents import Agent, get_agent
from workers.runtime.persistence import RunClaim, RunOutcome, RunRecorder
from workers.runtime.steps import RunLoop, report_failure
from workers.runtime.writer import RunWriter

__all__ = ["execute_run", "take_over"]

logger = logging.getLogger(__name__)

#: How long a worker keeps trying to write the end of a recorded run's stream while the stream
#: store is away (past its own retry window): the run's readers wait for that end.
OWED_END_PATIENCE = 600.0
_owed_ends: set[asyncio.Future[None]] = set()

#: How long an attempt waits for the database to record its outcome before it leaves the run
#: to be taken over (the stream is then left as it is, with no end and no error).
RECORD_PATIENCE = 60.0


async def execute_run(
    recorder: RunRecorder,
    streams: StreamManager,
    run_id: str,
    keeper: LeaseKeeper,
    agent: Agent | None = None,
    *,
    time_limit: float | None = None,
) -> RunOutcome | None:
    """Claim ``run_id`` for a new attempt and run it to its end: the agent loop, the outcome
    recorded, the stream closed, every write fenced by the attempt's epoch. The run's agent is
    looked up by name unless given (an agent defined without registering it). An attempt still
    going after ``time_limit`` seconds is stopped and the run fails ``time_limit_exceeded``,
    written under the same fence.

    ``None`` when there was nothing to claim (finished, or held by a live attempt) or when a
    newer attempt superseded this one midway (then it leaves everything to that one), or when
    the database never recorded its outcome (then the run is taken over once it is back).
    """
    checked_at = datetime.now(UTC)
    marked = await _marked_alive(streams, run_id)
    claim = await recorder.claim_run(
        run_id, keeper.worker, keeper.lease_seconds, take_over=not marked, checked_at=checked_at
    )
    if claim is None:
        return None
    task = asyncio.current_task()
    assert task is not None
    keeper.hold(run_id, claim.epoch, task)
    try:
        deadline = asyncio.timeout(time_limit)
        try:
            async with deadline:
                return await _attempt(recorder, streams, claim, agent, keeper.stop_signal(run_id))
        except TimeoutError:
            if not deadline.expired():
                raise  # a timeout of the run's own, not its time limit
            assert time_limit is not None
            return await _out_of_time(recorder, streams, claim, time_limit)
    except StreamSupersededError as exc:  # the stream's fence, or the database's (RunSupersededError)
        logger.warning("attempt %d of run %s was superseded: %s", claim.attempt, run_id, exc)
        return None


async def _marked_alive(streams: StreamManager, run_id: str) -> bool:
    """Whether a worker still marks ``run_id`` alive in the stream store, or the store cannot say.
    A message to take a run over may arrive long after the reaper sent it (behind a database
    stall, say), by when its worker may be renewing it again: only a run no one marks is taken."""
    try:
        return run_id in await streams.alive([run_id])
    except HelixError:
        return True


async def _out_of_time(recorder: RunRecorder, streams: StreamManager, claim: RunClaim, limit: float) -> RunOutcome:
    """Fail the run of attempt ``claim`` for running past ``limit`` seconds, fenced by its epoch:
    after a newer attempt took the run over, this changes nothing."""
    error = RunError(f"The run exceeded its time limit of {limit:g} s", RunErrorCode.TIME_LIMIT_EXCEEDED)
    writer = RunWriter(await _writer(streams, claim))
    outcome = await report_failure(writer, error, step=claim.step_count, usage={})
    await recorder.finish_run(claim.run_id, outcome, epoch=claim.epoch)
    await streams.fail_stream(claim.session_id, error.message, epoch=claim.epoch, holder=claim.run_id)
    logger.warning("run %s: attempt %d ran past its time limit of %g s", claim.run_id, claim.attempt, limit)
    return outcome


async def _writer(streams: StreamManager, claim: RunClaim) -> StreamWriter:
    """A writer for attempt ``claim``'s own chunks, fenced by its epoch, writing as its run's."""
    return await streams.create_writer(
        claim.session_id, claim.run_id, claim.agent, epoch=claim.epoch, holder=claim.run_id
    )


async def _attempt(
    recorder: RunRecorder, streams: StreamManager, claim: RunClaim, given: Agent | None, stop: asyncio.Event | None
) -> RunOutcome | None:
    session_id, epoch, holder = claim.session_id, claim.epoch, claim.run_id
    if claim.takeover:
        await take_over(streams, claim)
    else:
        await streams.fence(session_id, epoch, holder=holder)
    if claim.waiting:  # died after committing a pause, before recording it: just pause again
        outcome = RunOutcome("paused")
        if not await _record(recorder, claim, outcome):
            return None
        await streams.pause_stream(session_id, epoch=epoch, holder=holder)
        return outcome
    try:
        agent = given if given is not None and given.name == claim.agent else get_agent(claim.agent)
    except Exception as exc:
        writer = RunWriter(await _writer(streams, claim))
        outcome = await report_failure(writer, as_run_error(exc), step=0, usage={})
    else:
        loop = RunLoop(
            agent,
            session_id=session_id,
            run_id=claim.run_id,
            streams=streams,
            recorder=recorder,
            epoch=epoch,
            stop=stop,
        )
        try:
            outcome = await loop.run(message_id=claim.message_id, first_step=claim.step_count + 1)
        except DatabaseUnavailableError as exc:
            return await _fail_once_recorded(recorder, streams, claim, as_run_error(exc), step=loop.step)
    if not await _record(recorder, claim, outcome):
        return None
    if outcome.status == "failed":
        message = outcome.error_message or outcome.error_code
        await _close_stream(claim, [lambda: streams.fail_stream(session_id, message, epoch=epoch, holder=holder)])
    elif outcome.status == "paused":
        await _close_stream(claim, [lambda: streams.pause_stream(session_id, epoch=epoch, holder=holder)])
    else:
        await _close_stream(
            claim, [lambda: streams.end_stream(session_id, output=outcome.output, epoch=epoch, holder=holder)]
        )
    return outcome


async def _close_stream(claim: RunClaim, writes: list[Callable[[], Awaitable[object]]]) -> None:
    """Make ``writes``, in order: those that end the stream of a run whose outcome is recorded.
    Its readers wait for that end, so when the stream store stays away past its own retry
    window the writes left are made in the background once it is back (for up to
    :data:`OWED_END_PATIENCE` seconds), instead of never."""
    for index, write in enumerate(writes):
        try:
            await write()
        except StreamUnavailableError as exc:
            logger.warning("run %s: its stream's end could not be written yet (%s)", claim.run_id, exc)
            owed = asyncio.ensure_future(_close_later(claim, writes[index:]))
            _owed_ends.add(owed)
            owed.add_done_callback(_owed_ends.discard)
            return


async def _close_later(claim: RunClaim, writes: list[Callable[[], Awaitable[object]]]) -> None:
    backoff = Backoff(initial=1.0, cap=30.0, timeout=OWED_END_PATIENCE)
    while writes:
        if not await backoff.wait():
            logger.error("run %s: its stream's end was never written; its readers end with the store", claim.run_id)
            return
        try:
            await writes[0]()
        except StreamUnavailableError:
            continue
        except HelixError as exc:  # superseded by a later run, closed or gone: nothing is owed
            logger.info("run %s: its stream moved on before its end was written: %s", claim.run_id, exc)
            return
        writes = writes[1:]
    logger.info("run %s: its stream's end was written once the store was back", claim.run_id)


async def _record(recorder: RunRecorder, claim: RunClaim, outcome: RunOutcome) -> bool:
    """Record ``outcome`` under the attempt's epoch, waiting up to :data:`RECORD_PATIENCE`
    seconds for a database that does not answer; whether it was recorded.

    Not recorded, the stream is left as it is: the lease lapses, and once the database is back the
    reaper hands the run to another attempt, which continues after the last committed step.
    """
    backoff = Backoff(initial=0.5, cap=5.0, jitter=0.5, timeout=RECORD_PATIENCE)
    while True:
        try:
            await recorder.finish_run(claim.run_id, outcome, epoch=claim.epoch)
            return True
        except DatabaseUnavailableError:
            if not await backoff.wait():
                logger.error(
                    "run %s: attempt %d could not record its outcome (%s): the database did not answer "
                    "for %g s; the run goes to another attempt once it is back",
                    claim.run_id,
                    claim.attempt,
                    outcome.status,
                    RECORD_PATIENCE,
                )
                return False


async def _fail_once_recorded(
    recorder: RunRecorder, streams: StreamManager, claim: RunClaim, error: RunError, *, step: int
) -> RunOutcome | None:
    """Fail the run of attempt ``claim`` that the database failed: recorded first, then written
    to its stream (an ``error`` the stream carried before a takeover continued the answer would
    contradict it). ``None`` when it could not be recorded: then the stream is left untouched."""
    outcome = RunOutcome("failed", error_code=error.code, error_message=error.message)
    if not await _record(recorder, claim, outcome):
        return None

    async def report() -> None:
        await report_failure(RunWriter(await _writer(streams, claim)), error, step=step, usage={})

    async def fail() -> None:
        await streams.fail_stream(claim.session_id, error.message, epoch=claim.epoch, holder=claim.run_id)

    await _close_stream(claim, [report, fail])
    logger.warning("run %s: attempt %d failed: the database stopped answering", claim.run_id, claim.attempt)
    return outcome


async def take_over(streams: StreamManager, claim: RunClaim) -> None:
    """Start attempt ``claim`` where the last one left off: fence the stream, void the partial
    step the dead attempt was in (``step_discarded``), and tell readers to resync."""
    latest = await streams.fence(claim.session_id, claim.epoch, holder=claim.run_id)
    floor = claim.checkpoint_sequence if claim.checkpoint_sequence is not None else claim.start_sequence
    step = claim.step_count + 1
    partial = await streams.get_chunks_from_step(claim.session_id, step, min_sequence=floor)
    writer = RunWriter(await _writer(streams, claim))
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
