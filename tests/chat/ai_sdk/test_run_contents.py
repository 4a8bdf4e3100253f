"""The content of resumed runs, kept per process (chat.ai_sdk.run_contents): a run resumed again
is read only from where the last resume stopped, and what it shows is always what a rebuild from
the run's start shows, voided steps included."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chat.ai_sdk.partial import copy_partial_content, extend_partial_content, rebuild_partial_content
from chat.ai_sdk.run_contents import RunContents
from chat.ai_sdk.snapshot import without_discarded
from chat.ai_sdk.state import RunInfo
from streams.backends import InMemoryStreamManager
from streams.exceptions import StreamUnavailableError
from streams.protocol import Chunk, StepDiscarded, StoredChunk, TextDelta, ToolEnd, ToolStart
from tests.chat.ai_sdk.runs import chunk_of

RUN = RunInfo("run-1", "running", 0)


class CountingManager(InMemoryStreamManager):
    """The in-memory store, noting every range of chunks read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[int, int | None]] = []
        self.gate: asyncio.Event | None = None  # when set: reads wait for it
        self.failing = False  # reads fail, as with the store away

    async def get_chunks_from_sequence(
        self, stream_id: str, after_sequence: int, up_to: int | None = None
    ) -> list[StoredChunk]:
        self.reads.append((after_sequence, up_to))
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            raise StreamUnavailableError(stream_id, "Redis is unreachable")
        return await super().get_chunks_from_sequence(stream_id, after_sequence, up_to=up_to)


def delta(text: str) -> TextDelta:
    return TextDelta(agent_id="a", timestamp=1, delta=text)


async def stream_of(chunks: list[Chunk]) -> CountingManager:
    manager = CountingManager()
    writer = await manager.create_writer("s", "a")
    await writer.write_many(chunks)
    return manager


async def rebuilt(manager: InMemoryStreamManager, up_to: int) -> Any:
    return rebuild_partial_content(without_discarded(await manager.get_chunks_from_sequence("s", 0, up_to=up_to)))


async def test_a_run_resumed_again_is_read_only_from_where_the_last_resume_stopped() -> None:
    chunks: list[Chunk] = [delta(f"w{i} ") for i in range(1, 601)]
    chunks[300:302] = [
        ToolStart(agent_id="a", timestamp=1, tool_call_id="c1", tool_name="search", arguments={"q": 1}),
        ToolEnd(agent_id="a", timestamp=1, tool_call_id="c1", result={"hits": 2}, success=True),
    ]
    manager = await stream_of(chunks)
    contents = RunContents()
    at_250 = await contents.up_to(manager, "s", RUN, 250)
    assert manager.reads == [(0, 250)]
    assert at_250 == await rebuilt(manager, 250) and at_250.text.endswith("w250 ")
    manager.reads.clear()
    assert await contents.up_to(manager, "s", RUN, 250) == at_250
    assert manager.reads == []  # the same position again: nothing to read
    at_500 = await contents.up_to(manager, "s", RUN, 500)
    assert manager.reads == [(250, 500)]
    manager.reads.clear()
    assert at_500 == await rebuilt(manager, 500)
    assert [tool.state for tool in at_500.tool_calls] == ["completed"]
    assert at_250 == await rebuilt(manager, 250)  # what an earlier resume got is left as it was
    assert await contents.up_to(manager, "s", RUN, 100) == await rebuilt(manager, 100)  # an earlier position
    manager.reads.clear()
    at_600 = await contents.up_to(manager, "s", RUN, 600)
    assert manager.reads == [(500, 600)]  # the furthest content was kept
    assert at_600 == await rebuilt(manager, 600)


async def test_resumes_of_a_run_at_once_read_its_start_once() -> None:
    """The reconnects of a restart, or the tabs of one session: the resumes at or after a position
    being rebuilt wait for that rebuild and extend it; one before it rebuilds its own."""
    manager = await stream_of([delta(f"w{i} ") for i in range(1, 301)])
    manager.gate = asyncio.Event()
    contents = RunContents()
    resumes = [asyncio.ensure_future(contents.up_to(manager, "s", RUN, position)) for position in (200, 200, 250, 100)]
    for _ in range(5):  # every resume is under way: one rebuild waits on the store
        await asyncio.sleep(0)
    manager.gate.set()
    shown = await asyncio.gather(*resumes)
    assert sorted(manager.reads) == [(0, 100), (0, 200), (200, 250)]
    for content, position in zip(shown, (200, 200, 250, 100), strict=True):
        assert content == await rebuilt(manager, position)


async def test_resumes_waiting_on_a_rebuild_that_fails_fail_with_it() -> None:
    """With the store away, the resumes of a run at once get the rebuild's error when it gets it,
    not each after a rebuild of its own in turn."""
    manager = await stream_of([delta(f"w{i} ") for i in range(1, 301)])
    manager.gate, manager.failing = asyncio.Event(), True
    contents = RunContents()
    resumes = [asyncio.ensure_future(contents.up_to(manager, "s", RUN, position)) for position in (200, 200, 250)]
    for _ in range(5):
        await asyncio.sleep(0)
    manager.gate.set()
    outcomes = await asyncio.gather(*resumes, return_exceptions=True)
    assert all(isinstance(outcome, StreamUnavailableError) for outcome in outcomes), outcomes
    assert manager.reads == [(0, 200)]
    manager.failing = False  # the store is back: the next resume rebuilds
    assert await contents.up_to(manager, "s", RUN, 200) == await rebuilt(manager, 200)


async def test_a_step_voided_back_past_the_kept_content_is_left_out() -> None:
    void = StepDiscarded(
        run_id="r", step=2, attempt=1, from_sequence=3, to_sequence=4, reason="worker lost", agent_id="a", timestamp=1
    )
    manager = await stream_of([delta("one "), delta("two "), delta("half "), delta("a step "), void, delta("again")])
    kept_before_the_step = RunContents()
    assert (await kept_before_the_step.up_to(manager, "s", RUN, 2)).text == "one two "
    assert (await kept_before_the_step.up_to(manager, "s", RUN, 6)).text == "one two again"
    assert manager.reads[-1] == (2, 6)  # the voided step is all in the new chunks: extended
    kept_in_the_step = RunContents()
    assert (await kept_in_the_step.up_to(manager, "s", RUN, 4)).text == "one two half a step "
    manager.reads.clear()
    assert (await kept_in_the_step.up_to(manager, "s", RUN, 6)).text == "one two again"
    assert manager.reads == [(4, 6), (0, 6)]  # the step reaches into the kept content: rebuilt


async def test_runs_are_kept_apart_and_the_oldest_goes_first() -> None:
    manager = await stream_of([delta(f"w{i} ") for i in range(1, 11)])
    contents = RunContents(size=2)
    first, second, third = (
        RunInfo("run-1", "running", 0),
        RunInfo("run-2", "running", 4),
        RunInfo("run-3", "running", 6),
    )
    assert (await contents.up_to(manager, "s", first, 5)).text == "w1 w2 w3 w4 w5 "
    assert (await contents.up_to(manager, "s", second, 5)).text == "w5 "
    assert (await contents.up_to(manager, "s", third, 8)).text == "w7 w8 "
    manager.reads.clear()
    assert (await contents.up_to(manager, "s", third, 8)).text == "w7 w8 "
    assert (await contents.up_to(manager, "s", second, 5)).text == "w5 "
    assert manager.reads == []
    assert (await contents.up_to(manager, "s", first, 5)).text == "w1 w2 w3 w4 w5 "
    assert manager.reads == [(0, 5)]  # the oldest was let go
    other = await stream_of([delta("elsewhere")])  # another store: its own content
    assert (await contents.up_to(other, "s", first, 1)).text == "elsewhere"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["text", "thinking", "call", "end"]), st.sampled_from(["a", "a", "sub"]))),
    st.data(),
)
def test_content_extended_in_pieces_is_the_content_rebuilt_at_once(
    kinds: list[tuple[str, str]], data: st.DataObject
) -> None:
    chunks = [chunk_of(kind, agent, index) for index, (kind, agent) in enumerate(kinds)]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(chunks)), max_size=3)))
    content, start = rebuild_partial_content([]), 0
    for cut in [*cuts, len(chunks)]:
        before = copy_partial_content(content)
        extended = extend_partial_content(copy_partial_content(content), chunks[start:cut])
        assert content == before  # extending a copy leaves the original as it was
        content, start = extended, cut
    assert content == rebuild_partial_content(chunks)
