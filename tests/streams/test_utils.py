"""Stream utilities over chunks and over (chunk, sequence) pairs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from streams.protocol import Chunk, CustomEvent, StoredChunk, TextDelta, Thinking
from streams.utils import (
    collect_all,
    collect_text,
    combine_streams,
    exclude_types,
    filter_by_agent_id,
    filter_by_agent_type,
    filter_by_type,
    filter_with,
    skip,
    take,
)


async def source(items: Iterable[Any], delay: float = 0) -> AsyncIterator[Any]:
    for item in items:
        if delay:
            await asyncio.sleep(delay)
        yield item


A1 = TextDelta(agent_id="a", agent_type="main", timestamp=1, delta="Hel")
B1 = Thinking(agent_id="b", agent_type="researcher", timestamp=2, content="hmm", is_complete=False)
A2 = TextDelta(agent_id="a", agent_type="main", timestamp=3, delta="lo")
B2 = CustomEvent(agent_id="b", agent_type="researcher", timestamp=4, event_name="progress", data=1)
ALL: list[Chunk] = [A1, B1, A2, B2]


async def test_filters() -> None:
    assert await collect_all(filter_by_agent_id(source(ALL), "a")) == [A1, A2]
    assert await collect_all(filter_by_agent_type(source(ALL), "researcher")) == [B1, B2]
    assert await collect_all(filter_by_type(source(ALL), ["thinking", "custom"])) == [B1, B2]
    assert await collect_all(exclude_types(source(ALL), ["text_delta"])) == [B1, B2]
    assert await collect_all(filter_with(source(ALL), lambda c: c.timestamp > 2)) == [A2, B2]


async def test_filters_keep_sequences_of_stored_chunks() -> None:
    stored: list[StoredChunk] = [(chunk, i + 1) for i, chunk in enumerate(ALL)]
    assert await collect_all(filter_by_agent_id(source(stored), "b")) == [(B1, 2), (B2, 4)]
    assert await collect_text(source(stored)) == "Hello"


async def test_take_and_skip() -> None:
    assert await collect_all(take(source(ALL), 2)) == [A1, B1]
    assert await collect_all(take(source(ALL), 0)) == []
    assert await collect_all(skip(source(ALL), 3)) == [B2]
    assert await collect_all(skip(source(ALL), 9)) == []


async def test_take_stops_reading_the_source() -> None:
    pulled = []

    async def counting() -> AsyncIterator[TextDelta]:
        for chunk in (A1, A2, A1):
            pulled.append(chunk)
            yield chunk

    assert await collect_all(take(counting(), 1)) == [A1]
    assert pulled == [A1]


async def test_collect_text() -> None:
    assert await collect_text(source(ALL)) == "Hello"


async def test_combine_streams_interleaves_and_keeps_each_order() -> None:
    first = [TextDelta(agent_id="x", timestamp=i, delta=str(i)) for i in range(5)]
    second = [TextDelta(agent_id="y", timestamp=i, delta=str(i)) for i in range(5)]
    combined = await collect_all(combine_streams([source(first, 0.002), source(second, 0.003)]))
    assert sorted(combined, key=lambda c: (c.agent_id, c.timestamp)) == first + second
    assert [c for c in combined if c.agent_id == "x"] == first
    assert {c.agent_id for c in combined[:4]} == {"x", "y"}


async def test_combine_streams_raises_a_source_error() -> None:
    async def broken() -> AsyncIterator[TextDelta]:
        yield A1
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        await collect_all(combine_streams([broken(), source(ALL, 0.01)]))
