"""Async utilities over chunk streams: filter, combine, slice and collect.

Every function accepts an async iterable of chunks or of ``(chunk, sequence)`` pairs (what a
resumable reader yields) and passes items through unchanged, so sequences survive filtering.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable, Collection, Iterable
from typing import Any, TypeVar

from streams.protocol import Chunk, TextDelta, UnknownChunk

__all__ = [
    "collect_all",
    "collect_text",
    "combine_streams",
    "exclude_types",
    "filter_by_agent_id",
    "filter_by_agent_type",
    "filter_by_type",
    "filter_with",
    "skip",
    "take",
]

T = TypeVar("T")


def _chunk_of(item: Any) -> Chunk:
    return item[0] if isinstance(item, tuple) else item  # type: ignore[no-any-return]


def _type_of(item: Any) -> str:
    chunk: Any = _chunk_of(item)
    return chunk.type if isinstance(chunk, UnknownChunk) else chunk.__struct_config__.tag


async def filter_with(stream: AsyncIterable[T], predicate: Callable[[Chunk], bool]) -> AsyncIterator[T]:
    """Items whose chunk satisfies ``predicate``."""
    async for item in stream:
        if predicate(_chunk_of(item)):
            yield item


def filter_by_agent_id(stream: AsyncIterable[T], agent_id: str) -> AsyncIterator[T]:
    """Items emitted by the agent ``agent_id``."""
    return filter_with(stream, lambda chunk: chunk.agent_id == agent_id)


def filter_by_agent_type(stream: AsyncIterable[T], agent_type: str) -> AsyncIterator[T]:
    """Items emitted by agents of type ``agent_type``."""
    return filter_with(stream, lambda chunk: chunk.agent_type == agent_type)


def filter_by_type(stream: AsyncIterable[T], types: Iterable[str]) -> AsyncIterator[T]:
    """Items whose chunk ``type`` is one of ``types`` (wire names such as ``"text_delta"``)."""
    wanted = frozenset(types)
    return filter_with(stream, lambda chunk: _type_of(chunk) in wanted)


def exclude_types(stream: AsyncIterable[T], types: Collection[str]) -> AsyncIterator[T]:
    """Items whose chunk ``type`` is not one of ``types``."""
    unwanted = frozenset(types)
    return filter_with(stream, lambda chunk: _type_of(chunk) not in unwanted)


async def take(stream: AsyncIterable[T], count: int) -> AsyncIterator[T]:
    """The first ``count`` items; the source is not read further."""
    if count <= 0:
        return
    seen = 0
    async for item in stream:
        yield item
        seen += 1
        if seen >= count:
            return


async def skip(stream: AsyncIterable[T], count: int) -> AsyncIterator[T]:
    """Every item after the first ``count``."""
    seen = 0
    async for item in stream:
        if seen >= count:
            yield item
        else:
            seen += 1


async def combine_streams(streams: Iterable[AsyncIterable[T]]) -> AsyncIterator[T]:
    """Items of all ``streams`` as they arrive; ends when every source has ended.

    Order within one source is kept. An error in any source cancels the others and is raised.
    """
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue(maxsize=64)
    done, failed = object(), object()

    async def pump(source: AsyncIterable[T]) -> None:
        try:
            async for item in source:
                await queue.put((0, item))
        except Exception as exc:  # handed to the consumer, which re-raises it
            await queue.put((1, (failed, exc)))
            return
        await queue.put((1, (done, None)))

    tasks = [asyncio.ensure_future(pump(source)) for source in streams]
    remaining = len(tasks)
    try:
        while remaining:
            kind, value = await queue.get()
            if kind == 0:
                yield value
                continue
            marker, exc = value
            if marker is failed:
                raise exc
            remaining -= 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def collect_text(stream: AsyncIterable[Any]) -> str:
    """The concatenated ``delta`` of every ``text_delta`` chunk."""
    parts: list[str] = []
    async for item in stream:
        chunk = _chunk_of(item)
        if isinstance(chunk, TextDelta):
            parts.append(chunk.delta)
    return "".join(parts)


async def collect_all(stream: AsyncIterable[T]) -> list[T]:
    """Every item, in order."""
    return [item async for item in stream]
