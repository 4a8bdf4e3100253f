"""A demo producer: writes a canned answer into a stream, word by word, like a model would.

It exercises the producer side of the store (writer, step marks, end with output) with no LLM,
so the embedded default has something real to stream.
"""

from __future__ import annotations

import asyncio
import logging

from streams.backends.base import StreamManager

__all__ = ["DEMO_TEXT", "start_demo_stream", "write_demo_stream"]

logger = logging.getLogger(__name__)

DEMO_TEXT = (
    "Helix writes every event of an agent run into a stream with a sequence number. "
    "Drop the connection, refresh the page or lose a worker: the stream resumes from the "
    "last sequence you saw, with nothing missing and nothing shown twice."
)

_running: set[asyncio.Task[None]] = set()


async def write_demo_stream(
    manager: StreamManager, stream_id: str, *, text: str = DEMO_TEXT, delay: float = 0.05
) -> None:
    """Write ``text`` as ``text_delta`` chunks (one per word), then end the stream."""
    writer = await manager.create_writer(stream_id, agent_id=stream_id, agent_type="demo")
    try:
        await writer.begin_step(1)
        words = text.split(" ")
        for index, word in enumerate(words):
            await writer.write({"type": "text_delta", "delta": word if index == 0 else " " + word})
            await asyncio.sleep(delay)
        await writer.write({"type": "custom", "eventName": "demo_done", "data": {"words": len(words)}})
        await writer.close()
        await manager.end_stream(stream_id, output={"words": len(words)})
    except Exception as exc:
        logger.exception("demo stream %s failed", stream_id)
        await manager.fail_stream(stream_id, str(exc))


async def start_demo_stream(manager: StreamManager, stream_id: str, *, delay: float = 0.05) -> None:
    """Create the stream, then keep writing it in the background of the running loop."""
    await manager.create_writer(stream_id, agent_id=stream_id, agent_type="demo")
    task = asyncio.get_running_loop().create_task(write_demo_stream(manager, stream_id, delay=delay))
    _running.add(task)
    task.add_done_callback(_running.discard)
