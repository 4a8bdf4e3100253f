"""The step loop: one model call per step, then its tool calls, then a commit, until an answer.

Every event becomes a chunk in the session's stream. After each step the step's messages, the
agent's state and a checkpoint are committed together (:mod:`~workers.runtime.commits`). Errors
end the run with an ``error`` chunk and a recorded outcome, never a hung run or a half-committed
step. The parts of a step live beside this loop: the model call
(:mod:`~workers.runtime.model_stream`), the tools (:mod:`~workers.runtime.tools`), pausing on
people (:mod:`~workers.runtime.pauses`) and sub-agents (:mod:`~workers.runtime.subagents`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from pydantic import ValidationError as PydanticValidationError

from streams.backends.base import StreamManager
from streams.exceptions import HelixError, StreamSupersededError
from streams.messages import StoredMessage
from streams.protocol import ErrorChunk, OutputChunk, RunInterrupted
from workers.exceptions import DatabaseUnavailableError, RunError, RunErrorCode, StopRequested, as_run_error
from workers.runtime.agents import Agent
from workers.runtime.commits import commit_step
from workers.runtime.model_stream import TurnProgress, stream_turn
from workers.runtime.pauses import announce_pause, take_answers
from workers.runtime.persistence import PendingCallSpec, RunOutcome, RunRecorder
from workers.runtime.state import publishing_changes
from workers.runtime.tools import run_tools
from workers.runtime.writer import RunWriter

__all__ = ["RunLoop", "report_failure"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

STOP_CHECK_SECONDS = 0.5


async def report_failure(writer: RunWriter, error: RunError, *, step: int, usage: dict[str, int]) -> RunOutcome:
    """Write the ``error`` chunk of a run failing with ``error`` at ``step``; return the outcome to record."""
    await writer.emit(ErrorChunk, error=error.message, code=error.code, recoverable=error.recoverable, step=step)
    return RunOutcome("failed", error_code=error.code, error_message=error.message, usage=dict(usage))


class RunLoop:
    """Runs one agent over one session's stream. The root loop of a run persists every step
    through ``recorder``; a sub-agent's loop (``parent`` set, no recorder) keeps its history in
    memory."""

    def __init__(
        self,
        agent: Agent,
        *,
        session_id: str,
        run_id: str,
        streams: StreamManager,
        recorder: RunRecorder | None,
        agent_id: str | None = None,
        parent: RunLoop | None = None,
        epoch: int | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.agent = agent
        self.session_id = session_id
        self.run_id = run_id
        self.streams = streams
        self.recorder = recorder
        self.agent_id = agent_id or run_id
        self.parent = parent
        self.epoch: int | None = epoch if parent is None else parent.epoch  # fences the attempt's writes
        self.step = 0
        self.state: dict[str, Any] = {}
        self.messages: list[StoredMessage] = []
        self.message_id: str | None = None
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}
        self._writer: RunWriter | None = None
        self._turn: TurnProgress | None = None  # the step streaming now, until it is committed
        #: Set when the run's user stops it (the lease keeper's signal): the model call or tools
        #: the step is in are cancelled at once, and the run records ``run_interrupted``.
        self.stop = stop
        self._last_stop_check = 0.0
        self._answers: list[StoredMessage] = []  # tool results of a resumed pause, committed next
        self._applied: list[str] = []

    @property
    def writer(self) -> RunWriter:
        assert self._writer is not None, "the run has not started"
        return self._writer

    def child(self, agent: Agent, agent_id: str) -> RunLoop:
        """A sub-agent's loop under this one: same session, run and stream, nothing recorded."""
        return RunLoop(
            agent,
            session_id=self.session_id,
            run_id=self.run_id,
            streams=self.streams,
            recorder=None,
            agent_id=agent_id,
            parent=self,
        )

    async def run(
        self,
        *,
        messages: list[StoredMessage] | None = None,
        state: dict[str, Any] | None = None,
        message_id: str | None = None,
        first_step: int = 1,
    ) -> RunOutcome:
        """Run to the end and return how it ended (recorded by the caller).

        A new attempt of a run starts at ``first_step``, after the steps committed before it.
        A superseded attempt (:class:`~streams.exceptions.StreamSupersededError`, or its
        database side :class:`~workers.exceptions.RunSupersededError`) raises: it has nothing
        left to record. So does a run the database failed
        (:class:`~workers.exceptions.DatabaseUnavailableError`): its failure is written to the
        stream only once it is recorded, or a takeover could continue the answer after it.
        """
        if messages is None or state is None:
            assert self.recorder is not None
            session = await self.recorder.load_session(self.session_id)
            messages, state = session.messages, session.state
        self.messages, self.state, self.message_id = list(messages), dict(state), message_id
        # An attempt's loop (fenced by its epoch) writes as its run's: once the stream is open for
        # another run, or was deleted with the session, nothing of this one lands in it.
        holder = self.run_id if self.epoch is not None else None
        self._writer = RunWriter(
            await self.streams.create_writer(
                self.session_id, self.agent_id, self.agent.name, buffered=True, epoch=self.epoch, holder=holder
            )
        )
        try:
            if self.recorder is not None:
                await self._resume(self.recorder, first_step)
            return await self._steps(first_step)
        except (StreamSupersededError, DatabaseUnavailableError):
            raise  # superseded: nothing to record; the database: the attempt records it first
        except StopRequested:
            await self._keep_streamed()
            await self.writer.emit(RunInterrupted, run_id=self.run_id, step=self.step, reason="user_stop")
            return RunOutcome("interrupted", usage=dict(self.usage))
        except Exception as exc:  # anything but a RunError is a bug: recorded, never a hung run
            if not isinstance(exc, RunError):
                logger.exception("run %s failed", self.run_id)
            return await report_failure(self.writer, as_run_error(exc), step=self.step, usage=self.usage)
        finally:
            try:
                await self.writer.close()
            except StreamSupersededError:
                pass  # a newer attempt holds the stream: what this one buffered is void
            except HelixError:
                logger.exception("could not flush the last chunks of run %s", self.run_id)

    async def _until_stopped(self, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work`` (a model call, the step's tools); if the stop signal comes first, cancel
        it and raise :class:`StopRequested`."""
        if self.stop is None:
            return await work
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            raise StopRequested
        return task.result()

    async def _check_stop(self, force: bool = False) -> None:
        """Raise :class:`StopRequested` if the run's user stopped it (asked at most every
        ``STOP_CHECK_SECONDS`` unless ``force``)."""
        if self.recorder is None:
            return
        now = time.monotonic()
        if not force and now - self._last_stop_check < STOP_CHECK_SECONDS:
            return
        self._last_stop_check = now
        if await self.recorder.run_status(self.run_id) == "interrupted":
            raise StopRequested

    async def _steps(self, first_step: int) -> RunOutcome:
        for step in range(first_step, self.agent.max_steps + 1):
            self.step = step
            await self._check_stop(force=True)
            if self.parent is None:
                await self.writer.begin_step(step)
            pending: list[PendingCallSpec] = []
            async with publishing_changes(self.writer, self.state):
                self._turn = TurnProgress()
                assistant, calls = await self._until_stopped(
                    stream_turn(
                        self.agent,
                        self.messages,
                        self.writer,
                        message_id=self.message_id,
                        usage=self.usage,
                        check_stop=self._check_stop,
                        progress=self._turn,
                    )
                )
                step_messages = [assistant]
                if calls:
                    results, pending = await self._until_stopped(run_tools(self, calls))
                    step_messages += results
            if pending:
                return await self._pause(step_messages, pending)
            output: Any = None
            if not calls and self.agent.output_schema is not None:
                output = self._validate_output(assistant.content)
            await self._commit(step_messages)
            if not calls:
                if output is not None:
                    await self.writer.emit(OutputChunk, output=output)
                return RunOutcome(
                    "completed", output=output if output is not None else assistant.content, usage=dict(self.usage)
                )
        raise RunError(f"The agent did not finish within {self.agent.max_steps} steps", RunErrorCode.MAX_STEPS_EXCEEDED)

    def _validate_output(self, text: str) -> Any:
        schema = self.agent.output_schema
        assert schema is not None
        try:
            return schema.model_validate_json(text.strip()).model_dump(mode="json")
        except PydanticValidationError as exc:
            raise RunError(
                f"The final answer does not match the output schema: {exc}", RunErrorCode.OUTPUT_VALIDATION_FAILED
            ) from None

    async def _pause(self, step_messages: list[StoredMessage], pending: list[PendingCallSpec]) -> RunOutcome:
        """Commit the step so far with the calls it waits on, and stop until they are answered."""
        if self.recorder is None:
            raise RunError(
                "Only a run's own agent can wait on a person, not a sub-agent", RunErrorCode.UNSUPPORTED_PAUSE
            )
        await self._commit(step_messages, pending)
        await announce_pause(self.writer, self.run_id, self.step, pending)
        return RunOutcome("paused", usage=dict(self.usage))

    async def _resume(self, recorder: RunRecorder, first_step: int) -> None:
        """Take in the answers to the pause the run waited on; they are committed with the next step."""
        answers = await recorder.resolved_calls(self.run_id)
        if not answers:
            return
        self.step = first_step - 1
        async with publishing_changes(self.writer, self.state):
            self._answers = await take_answers(self, answers)
        self._applied = [answer.tool_call_id for answer in answers]
        self.messages += self._answers

    async def _keep_streamed(self) -> None:
        """A stopped run keeps what its user saw: the text and reasoning its unfinished step
        streamed are committed (calls that never finished are left out)."""
        turn, self._turn = self._turn, None
        streamed = turn.message(self.message_id) if turn is not None else None
        if streamed is not None:
            await self._commit([streamed])

    async def _commit(self, step_messages: list[StoredMessage], pending: list[PendingCallSpec] | None = None) -> None:
        self._turn = None  # the step's content is committed now
        self.messages += step_messages
        if self.recorder is None:
            return
        answers, applied, self._answers, self._applied = self._answers, self._applied, [], []
        await commit_step(
            self.recorder,
            self.writer,
            run_id=self.run_id,
            step=self.step,
            epoch=self.epoch,
            messages=[*answers, *step_messages],  # a resumed pause's results come first
            state=self.state,
            pending=pending or [],
            applied=applied,
        )
