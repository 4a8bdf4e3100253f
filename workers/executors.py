"""Executors: how a run gets executed, in the web process or on a Celery worker.

Both start a run the same way (:func:`start_run`): the session is created on first use, the
``messages``/``state`` overrides applied, the user message stored, a Run recorded with the
stream sequence before its first chunk (``start_sequence``), and the session's stream opened for
the run, which shuts out every earlier run (see ``StreamManager.open_stream``). Then the
in-process executor runs the agent as an asyncio task of the current loop, and the Celery
executor enqueues one task per run. A second execution on a session with a run in flight raises
:class:`~workers.exceptions.RunConflictError`.

Every execution is an *attempt* (:func:`workers.attempts.execute_run`) that claims the run under a
lease and a fencing epoch, and writes to the stream as the run's (its holder).
"""

from __future__ import annotations

import abc
import asyncio
import logging
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

import redis

from streams.backends.base import StreamManager
from streams.exceptions import HelixError, StreamCreationError
from streams.messages import StoredMessage
from workers.attempts import execute_run
from workers.exceptions import ExecutorUnavailableError, RunErrorCode
from workers.leases import LeaseKeeper, lease_keeper
from workers.presence import WorkerPresence
from workers.runtime.agents import Agent, get_agent
from workers.runtime.persistence import RunOutcome, RunRecorder

__all__ = [
    "CeleryExecutor",
    "Executor",
    "InProcessExecutor",
    "RunHandle",
    "start_run",
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
        """Wait for the run to end. (An ``asyncio.timeout`` block, not ``asyncio.wait_for``: on
        Python 3.11 that returns as though nothing had happened when the wait is cancelled in the
        turn of the loop in which the run ends.)"""
        async with asyncio.timeout(timeout):
            if self._result is not None:
                outcome = await asyncio.shield(self._result)
                return outcome or RunOutcome("superseded")  # another attempt owns the run now
            polled: RunOutcome = await self._poll()
            return polled


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
    caller_owns: bool | None = None,
) -> RunHandle:
    """Record a new run of ``agent`` on ``session_id`` (a new session when ``None``; ``owner_id``
    and ``caller_owns`` as :meth:`~workers.runtime.persistence.RunRecorder.start_run` takes them)."""
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
        caller_owns=caller_owns,
    )
    try:
        # Created, or the session's next run: sequences continue, and the stream is the run's. A
        # run of an earlier session of the same id (deleted while it ran) can write nothing here.
        await streams.open_stream(session_id, run_id)
    except Exception as exc:  # the run is recorded: fail it rather than leave it queued for good
        message = f"The stream of run {run_id} could not be set up: {exc}"
        failed = RunOutcome("failed", error_code=RunErrorCode.INTERNAL_ERROR, error_message=message)
        await recorder.finish_run(run_id, failed)
        if isinstance(exc, HelixError):
            raise
        raise StreamCreationError(session_id, message) from exc
    return RunHandle(run_id, session_id, start_sequence, message_id)


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
        caller_owns: bool | None = None,
    ) -> RunHandle:
        """Start a run of ``agent`` for ``message`` (see :func:`start_run`) and launch it."""
        resolved = get_agent(agent) if isinstance(agent, str) else agent
        await self._check_listening()  # before anything is recorded
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
            caller_owns=caller_owns,
        )
        try:
            task = await self._dispatch(handle.run_id, resolved)
        except Exception as exc:
            await self._unsent(handle, exc)
            raise ExecutorUnavailableError("The run could not be handed to a worker; try again in a moment") from exc
        if task is not None:
            handle._result = task
        else:
            handle._poll = lambda: self._poll(handle.run_id)
        return handle

    async def _unsent(self, handle: RunHandle, exc: Exception) -> None:
        """A recorded run that never reached a worker is failed, so no session waits behind it."""
        logger.error("run %s could not be sent to a worker: %s", handle.run_id, exc)
        message = "The run could not be handed to a worker"
        failed = RunOutcome("failed", error_code=RunErrorCode.ENQUEUE_FAILED, error_message=message)
        try:
            await self.recorder.finish_run(handle.run_id, failed)
            await self.streams.fail_stream(handle.session_id, message, holder=handle.run_id)
        except Exception:  # the reaper fails it once the stores are back
            logger.exception("could not record that run %s was never sent", handle.run_id)

    async def _check_listening(self) -> None:
        """Raise :class:`~workers.exceptions.ExecutorUnavailableError` when no worker would take
        a run now (nothing to check in process)."""
        return None

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
            keeper = self._keepers[loop] = lease_keeper(self.recorder, self.streams)
        task = loop.create_task(execute_run(self.recorder, self.streams, run_id, keeper, agent))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


RUN_TASK = "helix.run_agent"


class CeleryExecutor(Executor):
    """Enqueues one Celery task per run (the ``helix.run_agent`` task, sent by name)."""

    def __init__(
        self,
        recorder: RunRecorder,
        streams: StreamManager,
        *,
        queue: str | None = None,
        poll_interval: float = 0.2,
        presence: WorkerPresence | None = None,
    ) -> None:
        super().__init__(recorder, streams)
        self.queue = queue
        self.poll_interval = poll_interval
        #: Where workers say which queues they consume (:mod:`workers.presence`); ``None``: unchecked.
        self.presence = presence

    async def _check_listening(self) -> None:
        if self.presence is None:
            return
        from asgiref.sync import sync_to_async

        queue = self.queue or "celery"
        try:
            listening = await sync_to_async(self.presence.listening, thread_sensitive=False)(queue)
        except redis.RedisError as exc:  # the broker is away: sending the task would fail as well
            raise ExecutorUnavailableError("The task broker is unreachable; try again in a moment") from exc
        if not listening:
            logger.error(
                "no worker consumes the queue %r: runs cannot start (start one with `celery -A <app> worker -Q %s`)",
                queue,
                queue,
            )
            raise ExecutorUnavailableError("No worker is running for chat right now; try again in a moment")

    async def _dispatch(self, run_id: str, agent: Agent) -> None:
        from asgiref.sync import sync_to_async
        from celery import current_app

        options = {"queue": self.queue} if self.queue else {}
        await sync_to_async(current_app.send_task, thread_sensitive=False)(RUN_TASK, args=[run_id], **options)
