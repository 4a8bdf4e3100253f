"""Snapshots: everything a page needs to render a session and resume its stream.

Sequence-last: messages, state, run and checkpoint are read first and the stream position last,
so a stream resumed from ``streamSequence`` cannot miss an event that happened while the
snapshot was being built.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import msgspec

from chat.ai_sdk.loading import all_messages
from chat.ai_sdk.messages import PARTIAL_SUFFIX, convert_to_ui_messages, merge_assistant_messages, partial_message
from chat.ai_sdk.partial import rebuild_partial_content
from chat.ai_sdk.replay import has_replay_content
from chat.ai_sdk.state import RunInfo, StateStore
from chat.ai_sdk.ui_messages import UIMessage
from chat.exceptions import CheckpointNotFoundError
from streams.backends.base import StreamManager
from streams.backends.records import StreamStatus
from streams.protocol import StepCommitted, StepDiscarded, StoredChunk, now_ms

__all__ = ["Snapshot", "SnapshotDeps", "build_snapshot", "run_chunks"]


class Snapshot(msgspec.Struct, kw_only=True, rename="camel"):
    """What a page needs to render a session and resume its stream (camelCase on the wire).

    ``messages``: the merged UI messages. ``stream_sequence``: resume from here.
    ``start_sequence``: the current run's first chunk follows it. ``status``: of the stream
    (``active``, ``paused``, ``ended``, ``failed``). ``checkpoint_id`` and ``step_count``: the
    checkpoint shown and the steps its run had committed there (0 without one).
    ``existing_message_id``: the in-flight response's message id.
    """

    messages: list[UIMessage]
    state: dict[str, Any]
    stream_sequence: int
    start_sequence: int
    status: StreamStatus
    checkpoint_id: str | None
    step_count: int
    existing_message_id: str | None
    timestamp: int


@dataclass(frozen=True)
class SnapshotDeps:
    """What snapshots read: the state store, the stream store, and whether content is replayed."""

    state_store: StateStore
    stream_manager: StreamManager
    content_replay: bool = True


async def run_chunks(manager: StreamManager, session_id: str, run: RunInfo, up_to: int) -> list[StoredChunk]:
    """The chunks of ``run`` (after its start sequence) up to sequence ``up_to``, without those
    of steps a later attempt discarded."""
    return without_discarded(await manager.get_chunks_from_sequence(session_id, run.start_sequence, up_to=up_to))


def without_discarded(chunks: list[StoredChunk]) -> list[StoredChunk]:
    """``chunks`` less the ranges that ``step_discarded`` chunks among them void.

    When a worker dies mid-step, the attempt that takes over voids the partial step it left in
    the stream; what is rebuilt from the stream (replays, partial content) must not show it.
    """
    ranges = discarded_ranges(chunks)
    if not ranges:
        return chunks
    return [stored for stored in chunks if not any(low <= stored[1] <= high for low, high in ranges)]


def discarded_ranges(chunks: list[StoredChunk]) -> list[tuple[int, int]]:
    """The ``(from, to)`` sequence ranges that the ``step_discarded`` chunks among ``chunks`` void."""
    if StepDiscarded not in map(type, map(itemgetter(0), chunks)):  # the usual case, checked in C
        return []
    return [(c.from_sequence, c.to_sequence) for c, _ in chunks if isinstance(c, StepDiscarded)]


def _uncommitted(chunks: list[StoredChunk], loaded_messages: int, run: RunInfo) -> list[StoredChunk]:
    """The chunks of steps the loaded messages do not include yet.

    A step is committed to the database before its ``step_committed`` chunk is written; when the
    loaded messages hold more than the last visible commit says, the in-flight step has just been
    committed and nothing after that commit is partial any more.
    """
    committed, start = run.message_offset, 0
    for index, (chunk, _) in enumerate(chunks):
        if isinstance(chunk, StepCommitted):
            committed, start = chunk.message_count, index + 1
    return [] if loaded_messages > committed else chunks[start:]


async def build_snapshot(
    deps: SnapshotDeps,
    session_id: str,
    include_partial_content: bool | None = None,
    checkpoint_id: str | None = None,
) -> Snapshot | None:
    """The session's snapshot, or ``None`` for an unknown session.

    While a run is in flight its content is either replayed by the resumed stream (content replay
    on: the messages then end before the run's output, so nothing is shown twice) or included as
    a ``-partial`` assistant message (replay off, or a paused run, or ``include_partial_content``).
    With ``checkpoint_id`` it is the session as that checkpoint left it: its messages and state,
    and its stream sequence to resume from (:class:`CheckpointNotFoundError` when there is none).
    """
    store = deps.state_store
    if not await store.session_exists(session_id):
        return None
    if checkpoint_id is not None:
        return await _at_checkpoint(deps, session_id, checkpoint_id)
    state = await store.get_state(session_id)
    run = await store.get_current_run(session_id)
    checkpoint = await store.get_checkpoint(session_id)
    page = await store.get_messages(session_id)
    decisions = await store.get_tool_decisions(session_id)
    info = await deps.stream_manager.get_stream_info(session_id)  # sequence last
    status = info.status if info is not None else "ended"
    sequence = info.latest_sequence if info is not None else 0

    in_flight = run is not None and run.is_active and status in ("active", "paused")
    include_partial = include_partial_content
    if include_partial is None:
        include_partial = not deps.content_replay or status == "paused"
    existing_message_id: str | None = None
    if run is not None and in_flight:
        existing_message_id = run.message_id
        if include_partial:
            messages = convert_to_ui_messages(page.messages, decisions=decisions)
            chunks = _uncommitted(await run_chunks(deps.stream_manager, session_id, run, sequence), page.total, run)
            content = rebuild_partial_content(chunks)
            if has_replay_content(content):
                # A paused run shows its pending calls; an active one leaves calls in flight to
                # the resumed stream, which re-announces them.
                message_id = f"{run.message_id or run.run_id}{PARTIAL_SUFFIX}"
                messages.append(partial_message(content, message_id, unfinished_tools=status == "paused"))
        else:
            messages = convert_to_ui_messages(page.messages[: run.message_offset], decisions=decisions)
    else:
        stored = await all_messages(store, session_id) if page.has_more else page.messages
        messages = convert_to_ui_messages(stored, decisions=decisions)
    return Snapshot(
        messages=merge_assistant_messages(messages),
        state=state,
        stream_sequence=sequence,
        start_sequence=run.start_sequence if run is not None else 0,
        status=status,
        checkpoint_id=checkpoint.checkpoint_id if checkpoint is not None else None,
        step_count=checkpoint.step if checkpoint is not None else 0,
        existing_message_id=existing_message_id,
        timestamp=now_ms(),
    )


async def _at_checkpoint(deps: SnapshotDeps, session_id: str, checkpoint_id: str) -> Snapshot:
    store = deps.state_store
    checkpoint = await store.find_checkpoint(session_id, checkpoint_id)
    if checkpoint is None:
        raise CheckpointNotFoundError(f"Session {session_id} has no checkpoint {checkpoint_id!r}")
    stored = (await store.get_messages(session_id, 0, checkpoint.message_count)).messages
    messages = convert_to_ui_messages(stored, decisions=await store.get_tool_decisions(session_id))
    run = await store.get_current_run(session_id)
    info = await deps.stream_manager.get_stream_info(session_id)
    return Snapshot(
        messages=merge_assistant_messages(messages),
        state=dict(checkpoint.state or {}),
        stream_sequence=checkpoint.stream_sequence,
        start_sequence=run.start_sequence if run is not None else 0,
        status=info.status if info is not None else "ended",
        checkpoint_id=checkpoint.checkpoint_id,
        step_count=checkpoint.step,
        existing_message_id=run.message_id if run is not None and run.is_active else None,
        timestamp=now_ms(),
    )
