"""The SSE body that resumes a session's current run for an AI SDK client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from chat.ai_sdk.events import UIMessageChunk
from chat.ai_sdk.messages import PARTIAL_SUFFIX
from chat.ai_sdk.replay import has_replay_content, replay_events, unfinished_tool_events
from chat.ai_sdk.run_contents import run_contents
from chat.ai_sdk.sse import ui_message_stream
from chat.ai_sdk.state import RunInfo
from chat.ai_sdk.transformer import StreamTransformer
from streams.backends.base import StreamManager
from streams.backends.readers import ResumableStreamReader
from streams.backends.records import ReadPage
from streams.sse import encode_event

__all__ = ["resume_position", "resume_run_stream"]


def resume_position(run: RunInfo | None, from_sequence: int | None) -> int:
    """Where a reader resuming ``run`` for a client at ``from_sequence`` starts: the run's start
    when the client names no position (or one before the run), else the client's position."""
    start = 0 if run is None else run.start_sequence
    return start if from_sequence is None or from_sequence <= start else from_sequence


async def resume_run_stream(
    manager: StreamManager,
    session_id: str,
    run: RunInfo,
    from_sequence: int | None,
    *,
    content_replay: bool = True,
    transformer_options: dict[str, Any] | None = None,
    message_id: str | None = None,
    keep_alive: float | None = None,
    first_page: ReadPage | None = None,
) -> AsyncIterator[bytes] | None:
    """SSE bytes for a client resuming ``run``; ``None`` when the stream is gone or failed.
    ``keep_alive``: seconds of silence after which the body sends a keep-alive comment.
    ``first_page``: the stream's first page from :func:`resume_position`, when the caller read it.

    * no position (``useChat({resume: true})``): the run is replayed from its first chunk, then
      followed live; the client rebuilds the message from the replayed ``start``;
    * a position with content replay: ``start`` and the run's content up to the position as one
      delta per block, then live chunks after it (pair with a snapshot taken with replay on, which
      leaves an active run's answer out; the caller turns replay off for a paused run, whose
      answer every snapshot shows);
    * a position without content replay: no ``start`` (the client keeps the snapshot's
      ``-partial`` message and adds to it or after it), the run's calls still in flight (which
      that message leaves out), then live chunks after the position.

    ``message_id``: the id under which the client shows this run's answer, when it names one
    (the run's own, or its ``-partial`` form from a snapshot taken without content replay):
    ``start`` carries it, so a client that rebuilds the answer replaces the message it shows.
    """
    shown = message_id if message_id is not None and message_id.removesuffix(PARTIAL_SUFFIX) == run.message_id else None
    options = {"message_id": shown or run.message_id, **(transformer_options or {})}
    transformer = StreamTransformer(**options)
    position = resume_position(run, from_sequence)
    reader = await manager.create_resumable_reader(session_id, position, first_page=first_page)
    if reader is None:
        return None
    if position == run.start_sequence:
        return ui_message_stream(reader.batches(keep_alive=keep_alive), transformer)
    return _resumed(manager, session_id, run, position, reader, transformer, content_replay, keep_alive)


async def _resumed(
    manager: StreamManager,
    session_id: str,
    run: RunInfo,
    position: int,
    reader: ResumableStreamReader,
    transformer: StreamTransformer,
    content_replay: bool,
    keep_alive: float | None,
) -> AsyncIterator[bytes]:
    if content_replay:
        # `start` needs only the message id: send it before reading the run's content, so the
        # client hears back at once however long the run is.
        yield b"".join([encode_event(event, id=position) for event in transformer.start()])
    content = await run_contents.up_to(manager, session_id, run, position)
    events: list[UIMessageChunk] = []
    if content_replay:
        events, text_block, reasoning_block = replay_events(content, lambda: transformer.new_block_id("replay"))
        transformer.resume_from(content, text_block=text_block, reasoning_block=reasoning_block)
    else:
        # The client shows the content in the snapshot's -partial message. No `start`: a
        # 6.0.304+ client resets a message whose id `start` names (the stored steps carry the
        # run's id) and so appends a fresh one, an older client continues the partial one.
        # Either way the calls still in flight are re-announced where the results will land.
        if run.step_count == 0 and not has_replay_content(content):
            events = transformer.start(content.agent_id)  # nothing shown yet: name the message
        events += unfinished_tool_events(content)
        transformer.resume_from(content)
    head = [(event, position) for event in events]
    async for part in ui_message_stream(reader.batches(keep_alive=keep_alive), transformer, head=head):
        yield part
