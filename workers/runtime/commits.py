"""Commits: a step's messages, the agent's state and a checkpoint made durable together, then
announced.

Only once the database holds the step does the stream say ``step_committed`` and
``checkpoint_created``: a chunk never claims what the database does not hold. The chunks emitted
so far are flushed first, so the checkpoint's stream sequence covers the whole step.
"""

from __future__ import annotations

from typing import Any

from streams.messages import StoredMessage
from streams.protocol import CheckpointCreated, StepCommitted
from workers.runtime.persistence import PendingCallSpec, RunRecorder
from workers.runtime.state import json_copy
from workers.runtime.writer import RunWriter

__all__ = ["commit_step"]


async def commit_step(
    recorder: RunRecorder,
    writer: RunWriter,
    *,
    run_id: str,
    step: int,
    epoch: int | None,
    messages: list[StoredMessage],
    state: dict[str, Any],
    pending: list[PendingCallSpec],
    applied: list[str],
) -> None:
    """Commit step ``step`` of ``run_id`` under ``epoch``: its ``messages``, ``state``, the
    ``pending`` calls it pauses on and the ``applied`` answers it took in; then announce it."""
    sequence = await writer.flush() or 0
    checkpoint_id, count = await recorder.commit_step(
        run_id,
        step,
        messages,
        json_copy(state),
        sequence,
        epoch=epoch,
        pending=pending or None,
        applied=applied or None,
    )
    await writer.emit(StepCommitted, run_id=run_id, step=step, message_count=count)
    await writer.emit(CheckpointCreated, run_id=run_id, checkpoint_id=checkpoint_id, step=step, message_count=count)
