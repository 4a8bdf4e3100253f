"""The Helix chunks that reach the client only as transient ``data-*`` events, and how.

Sub-agent progress, custom events, state patches, the final output and every control-flow chunk
become ``data-<name>`` events marked ``transient``: the client hands them to ``onData`` and never
keeps them as message parts. None of them is in the stored messages, so a part made of one would
make the live message differ from the one loaded after a reload. State comes with the snapshot;
the output with the run. A chunk of a sub-agent (another ``agentId``) is forwarded whole, as
``data-subagent-chunk``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chat.ai_sdk.events import DataChunk
from streams.protocol import (
    CheckpointCreated,
    Chunk,
    CustomEvent,
    ExecutorSuperseded,
    OutputChunk,
    RunInterrupted,
    RunPaused,
    RunResumed,
    StatePatch,
    StepCommitted,
    StepDiscarded,
    StreamResync,
    SubAgentEnd,
    SubAgentStart,
    dump_chunk,
)

__all__ = ["CONTROL_EVENTS", "DATA_EVENTS", "subagent_chunk", "transient"]

CONTROL_EVENTS: dict[type, str] = {
    RunInterrupted: "data-run-interrupted",
    RunResumed: "data-run-resumed",
    RunPaused: "data-run-paused",
    CheckpointCreated: "data-checkpoint-created",
    StepCommitted: "data-step-committed",
    StepDiscarded: "data-step-discarded",
    StreamResync: "data-stream-resync",
    ExecutorSuperseded: "data-executor-superseded",
}
"""Control-flow chunks and the transient data event each becomes."""


def transient(event_type: str, data: Any) -> DataChunk:
    """A ``data-*`` event of type ``event_type`` that the client does not keep."""
    return DataChunk(type=event_type, data=data, transient=True)


def subagent_chunk(chunk: Chunk) -> DataChunk:
    """A sub-agent's chunk, forwarded whole (wire form, ``type`` included)."""
    return transient("data-subagent-chunk", dump_chunk(chunk))


def _payload(chunk: Chunk) -> dict[str, Any]:
    data = dump_chunk(chunk)
    del data["type"]
    return data


def _subagent(chunk: SubAgentStart | SubAgentEnd) -> DataChunk:
    name = "data-subagent-start" if isinstance(chunk, SubAgentStart) else "data-subagent-end"
    return transient(name, _payload(chunk))


def _custom(chunk: CustomEvent) -> DataChunk:
    return transient(f"data-{chunk.event_name}", chunk.data)


def _state_patch(chunk: StatePatch) -> DataChunk:
    return transient("data-state-patch", _payload(chunk)["patches"])


def _output(chunk: OutputChunk) -> DataChunk:
    return transient("data-output", chunk.output)


def _control(chunk: Chunk) -> DataChunk:
    return transient(CONTROL_EVENTS[type(chunk)], _payload(chunk))


DATA_EVENTS: dict[type, Callable[[Any], DataChunk]] = {
    SubAgentStart: _subagent,
    SubAgentEnd: _subagent,
    CustomEvent: _custom,
    StatePatch: _state_patch,
    OutputChunk: _output,
    **dict.fromkeys(CONTROL_EVENTS, _control),
}
"""Each chunk type that becomes a transient data event, and the function that makes it."""
