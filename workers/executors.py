"""Executors: how a run gets executed, in the web process or on a Celery worker.

Both start a run the same way (:func:`start_run`): the session is created on first use, the
``messages``/``state`` overrides applied, the user message stored, and a Run recorded with the
stream sequence before its first chunk (``start_sequence``). Then the in-process executor runs
the agent as an asyncio task of the current loop, and the Celery executor enqueues one task per
run. A second execution on a session with a run in flight raises ``RunConflictError``.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from streams.backends.base import StreamManager
from streams.messages import StoredMessage
from workers.runtime.agents import Agent, get_agent
from workers.runtime.loop import RunLoop
from workers.runtime.persistence import RunOutcome, RunRecorder

__all__ = ["CeleryExecutor", "Executor", "InProcessExecutor", "RunHandle", "execute_run", "start_run"]

logger = logging.getLogger(__name__)


@dataclass
class RunHandle:
    """A started run: ids and start sequence now, its outcome through :meth:`result`."""

    run_id: str
    session_id: str
    start_sequence: int
    message_id: str
    _result: asyncio.Future[RunOutcome] | None = field(default=None, repr=False)
    _poll: Any = field(default=None, repr=False)

    async def result(self, timeout: float | None = None) -> RunOutcome:
        """Wait for the run to end."""
        if self._result is not None:
            return await asyncio.wait_for(asyncio.shield(self._result), timeout)
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


async def execute_run(
    recorder: RunRecorder, streams: StreamManager, run_id: str, session_id: str, agent: Agent | str, message_id: str
) -> RunOutcome:
    """Run a recorded run to its end: the agent loop, the outcome recorded, the stream closed.

    Whatever happens inside, the run ends recorded and its stream ended or failed.
    """
    try:
        resolved = get_agent(agent) if isinstance(agent, str) else agent
    except Exception as exc:
        outcome = RunOutcome("failed", error_code=getattr(exc, "code", "internal_error"), error_message=str(exc))
        writer = await streams.create_writer(session_id, run_id, str(agent))
        await writer.write(
            {"type": "error", "error": str(exc), "code": outcome.error_code, "recoverable": False, "step": 0}
        )
    else:
        await recorder.mark_running(run_id)
        outcome = await RunLoop(resolved, session_id=session_id, run_id=run_id, streams=streams, recorder=recorder).run(
            message_id=message_id
        )
    await recorder.finish_run(run_id, outcome)
    if outcome.status == "failed":
        await streams.fail_stream(session_id, outcome.error_message or outcome.error_code)
    elif outcome.status != "paused":
        await streams.end_stream(session_id, output=outcome.output)
    return outcome


class Executor(abc.ABC):
    """Starts runs; ``execute`` returns once the run is recorded and its stream exists."""

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
        await self._launch(resolved, handle)
        return handle

    @abc.abstractmethod
    async def _launch(self, agent: Agent, handle: RunHandle) -> None:
        """Get the recorded run executed, and give ``handle`` a way to wait for its outcome."""


class InProcessExecutor(Executor):
    """Runs agents as asyncio tasks of the running loop (the embedded default)."""

    def __init__(self, recorder: RunRecorder, streams: StreamManager) -> None:
        super().__init__(recorder, streams)
        self._tasks: set[asyncio.Task[RunOutcome]] = set()

    async def _launch(self, agent: Agent, handle: RunHandle) -> None:
        task = asyncio.get_running_loop().create_task(
            execute_run(self.recorder, self.streams, handle.run_id, handle.session_id, agent, handle.message_id)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        handle._result = task


RUN_TASK = "helix.run_agent"


class CeleryExecutor(Executor):
    """Enqueues one Celery task per run (the ``helix.run_agent`` task, sent by name)."""

    def __init__(
        self, recorder: RunRecorder, streams: StreamManager, *, queue: str | None = None, poll_interval: float = 0.2
    ) -> None:
        super().__init__(recorder, streams)
        self.queue = queue
        self.poll_interval = poll_interval

    async def _launch(self, agent: Agent, handle: RunHandle) -> None:
        from asgiref.sync import sync_to_async
        from celery import current_app

        options = {"queue": self.queue} if self.queue else {}
        await sync_to_async(current_app.send_task, thread_sensitive=False)(RUN_TASK, args=[handle.run_id], **options)

        async def poll() -> RunOutcome:
            while True:
                status = await self.recorder.run_status(handle.run_id)
                if status in ("completed", "failed", "interrupted", "paused"):
                    return RunOutcome(status)
                await asyncio.sleep(self.poll_interval)

        handle._poll = poll
