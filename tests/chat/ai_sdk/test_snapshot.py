"""Snapshots: unknown sessions, multi-turn start sequences, partial content with and without replay."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat.ai_sdk.events import StartChunk, TextStartChunk
from chat.ai_sdk.partial import rebuild_partial_content
from chat.ai_sdk.replay import create_replay_events, has_replay_content, replay_events
from chat.ai_sdk.snapshot import SnapshotDeps, build_snapshot, without_discarded
from chat.ai_sdk.state import CheckpointInfo, InMemoryStateStore
from chat.ai_sdk.transformer import StreamTransformer
from streams.backends import InMemoryStreamManager
from streams.protocol import (
    Chunk,
    StepDiscarded,
    TextDelta,
    Thinking,
    ToolArgStreamDelta,
    ToolArgStreamStart,
    ToolEnd,
    ToolStart,
    stored_chunks,
)
from tests.chat.ai_sdk.runs import RunSpec, StepSpec, ToolSpec, chunk_of
from tests.chat.ai_sdk.scenario import SESSION, Scenario

SPEC = RunSpec(
    steps=[
        StepSpec(text=["Checking ", "now."], tools=[ToolSpec("c1", "search", {"q": 1}, {"hits": 2})]),
        StepSpec(reasoning=["Got it."], text=["Two ", "hits."]),
    ]
)
PREVIOUS = RunSpec(steps=[StepSpec(text=["Hello."])], agent_id="run-0", message_id="msg-run-0")


async def test_unknown_session_has_no_snapshot() -> None:
    deps = SnapshotDeps(InMemoryStateStore(), InMemoryStreamManager())
    assert await build_snapshot(deps, "nope") is None


async def test_a_finished_session() -> None:
    scenario = await Scenario.create(SPEC, PREVIOUS)
    await scenario.finish()
    scenario.store.set_state(SESSION, {"notes": ["a"]})
    scenario.store.set_checkpoint(SESSION, CheckpointInfo("cp-2", 2, 5, 20))
    snapshot = await scenario.snapshot()
    info = await scenario.manager.get_stream_info(SESSION)
    assert info is not None
    assert snapshot["status"] == "ended"
    assert snapshot["streamSequence"] == info.latest_sequence
    assert snapshot["startSequence"] == scenario.start_sequence > 0  # the earlier turn's chunks come first
    assert snapshot["checkpointId"] == "cp-2" and snapshot["state"] == {"notes": ["a"]}
    assert snapshot["stepCount"] == 2  # the checkpoint's step
    assert snapshot["existingMessageId"] is None
    assert [m["id"] for m in snapshot["messages"]] == ["u0", "msg-run-0", "u1", "msg-run-1"]
    assert snapshot["messages"][-1]["parts"][-1] == {"type": "text", "text": "Two hits.", "state": "done"}


async def test_in_flight_with_content_replay_leaves_the_run_out() -> None:
    scenario = await Scenario.create(SPEC, PREVIOUS)
    await scenario.advance(len(scenario.run.chunks) - 3)  # step 1 committed, step 2 streaming
    snapshot = await scenario.snapshot(content_replay=True)
    assert snapshot["status"] == "active"
    assert [m["id"] for m in snapshot["messages"]] == ["u0", "msg-run-0", "u1"]
    assert snapshot["existingMessageId"] == "msg-run-1"


async def test_in_flight_without_replay_adds_a_partial_message() -> None:
    scenario = await Scenario.create(SPEC, PREVIOUS)
    await scenario.advance(len(scenario.run.chunks) - 3)
    snapshot = await scenario.snapshot(content_replay=False)
    assert [m["id"] for m in snapshot["messages"]] == ["u0", "msg-run-0", "u1", "msg-run-1-partial"]
    parts = snapshot["messages"][-1]["parts"]
    assert [p["type"] for p in parts] == ["text", "dynamic-tool", "reasoning", "text"]
    assert parts[-1] == {"type": "text", "text": "Two ", "state": "streaming"}  # "hits." is not written yet
    forced = await build_snapshot(scenario.deps(content_replay=True), SESSION, include_partial_content=True)
    assert forced is not None and forced.messages[-1].id == "msg-run-1-partial"


@pytest.mark.parametrize("commit_early", [False, True])
async def test_a_step_committed_before_its_chunk_is_not_shown_twice(commit_early: bool) -> None:
    scenario = await Scenario.create(SPEC)
    step_end = scenario.run.steps[0][1]
    await scenario.advance(step_end, commit_early=commit_early)
    snapshot = await scenario.snapshot(content_replay=False)
    text = "".join(p.get("text", "") for m in snapshot["messages"] if m["role"] == "assistant" for p in m["parts"])
    assert text == "Checking now."


async def test_paused_runs_show_their_pending_calls() -> None:
    scenario = await Scenario.create(SPEC)
    tool_start = next(i for i, c in enumerate(scenario.run.chunks) if isinstance(c, ToolStart))
    await scenario.advance(tool_start + 1)
    await scenario.manager.pause_stream(SESSION)
    snapshot = await scenario.snapshot(content_replay=True)
    assert snapshot["status"] == "paused"
    assert snapshot["messages"][-1]["parts"][-1]["state"] == "input-available"


def test_partial_content_and_replay_events() -> None:
    a = "run-1"
    chunks: list[Chunk] = [
        Thinking(agent_id=a, timestamp=1, content="hmm", is_complete=True),
        TextDelta(agent_id=a, timestamp=1, delta="Hel"),
        TextDelta(agent_id="sub", timestamp=1, delta="ignored"),
        TextDelta(agent_id=a, timestamp=1, delta="lo"),
        ToolArgStreamStart(agent_id=a, timestamp=1, tool_call_id="c1", tool_name="search"),
        ToolArgStreamDelta(agent_id=a, timestamp=1, tool_call_id="c1", delta='{"q"'),
    ]
    content = rebuild_partial_content(chunks)
    assert (content.text, content.reasoning, content.agent_id) == ("Hello", "hmm", "run-1")
    assert [(t.tool_call_id, t.state, t.input_text) for t in content.tool_calls] == [("c1", "streaming", '{"q"')]
    assert has_replay_content(content) and not has_replay_content(rebuild_partial_content([]))
    blocks = iter(["b1", "b2"])
    events, text_block, reasoning_block = replay_events(content, lambda: next(blocks))
    assert (text_block, reasoning_block) == (None, None)
    assert msgspec.to_builtins(events) == [
        {"type": "reasoning-start", "id": "b1"},
        {"type": "reasoning-delta", "id": "b1", "delta": "hmm"},
        {"type": "reasoning-end", "id": "b1"},
        {"type": "text-start", "id": "b2"},
        {"type": "text-delta", "id": "b2", "delta": "Hello"},
        {"type": "text-end", "id": "b2"},
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "search", "dynamic": True},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"q"'},
    ]
    open_text = rebuild_partial_content(chunks[:4])
    assert replay_events(open_text, lambda: "blk").text_block == "blk"  # left open: live deltas continue it


def test_create_replay_events_starts_the_message_it_names() -> None:
    """The seeds' helper for a custom stream: ``start`` with the message id (given, generated
    from the agent, or fresh), then the content, and the blocks it leaves open."""
    content = rebuild_partial_content([TextDelta(agent_id="run-1", timestamp=1, delta="Hi")])
    named = create_replay_events(content, message_id="msg-1")
    assert msgspec.to_builtins(named.events)[:3] == [
        {"type": "start", "messageId": "msg-1"},
        {"type": "text-start", "id": "replay-1"},
        {"type": "text-delta", "id": "replay-1", "delta": "Hi"},
    ]
    assert (named.message_id, named.text_block_id, named.reasoning_block_id) == ("msg-1", "replay-1", None)
    generated = create_replay_events(content, generate_message_id=lambda agent: f"{agent}-m", agent_id="run-1")
    assert generated.message_id == "run-1-m" and generated.events[0] == StartChunk(message_id="run-1-m")
    headless = create_replay_events(content, start=False, generate_block_id=lambda: "b")
    assert headless.events[0] == TextStartChunk(id="b") and headless.message_id.startswith("msg-")


def test_a_resumed_transformer_continues_where_the_client_is() -> None:
    a = "run-1"
    shown: list[Chunk] = [
        TextDelta(agent_id=a, timestamp=1, delta="Hel"),
        ToolArgStreamStart(agent_id=a, timestamp=1, tool_call_id="c1", tool_name="search"),
        ToolStart(agent_id=a, timestamp=1, tool_call_id="c0", tool_name="search", arguments={}),
        TextDelta(agent_id=a, timestamp=1, delta="lo"),
    ]
    transformer = StreamTransformer(message_id="m")
    transformer.resume_from(rebuild_partial_content(shown), text_block="blk")
    live: list[Chunk] = [
        TextDelta(agent_id=a, timestamp=1, delta="!"),
        ToolArgStreamDelta(agent_id=a, timestamp=1, tool_call_id="c1", delta="{}"),
        ToolEnd(agent_id=a, timestamp=1, tool_call_id="c0", result=1, success=True),
    ]
    events = [event for chunk in live for event in transformer.transform(chunk)[0]] + transformer.finalize()
    assert msgspec.to_builtins(events) == [  # no start, no second text-start, no unknown call
        {"type": "text-delta", "id": "blk", "delta": "!"},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "{}"},
        {"type": "text-end", "id": "blk"},
        {"type": "tool-output-available", "toolCallId": "c0", "output": 1, "dynamic": True},
        {"type": "finish"},
    ]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["text", "thinking", "call", "end"]), st.sampled_from(["a", "a", "sub"]))))
def test_consecutive_text_deltas_folded_at_once_make_the_same_content(kinds: list[tuple[str, str]]) -> None:
    """The rebuild joins a run of text deltas before adding it: the content is the one that
    adding them one by one makes, sub-agents' chunks between them included."""
    from chat.ai_sdk.partial import PartialContent, _Builder

    chunks = [chunk_of(kind, agent, index) for index, (kind, agent) in enumerate(kinds)]
    one_by_one = PartialContent(agent_id="a")
    builder = _Builder(one_by_one)
    for chunk in chunks:
        if chunk.agent_id == "a":
            builder.add(chunk)
    assert rebuild_partial_content(chunks, agent_id="a") == one_by_one


def test_the_steps_a_later_attempt_voided_are_left_out_and_a_clean_run_is_kept_as_it_is() -> None:
    def delta(text: str) -> TextDelta:
        return TextDelta(agent_id="a", timestamp=1, delta=text)

    void = StepDiscarded(
        run_id="r", step=2, attempt=1, from_sequence=3, to_sequence=4, reason="worker lost", agent_id="a", timestamp=1
    )
    clean = stored_chunks([delta("one "), delta("two ")], 1)
    assert without_discarded(clean) is clean
    mixed = stored_chunks([delta("one "), delta("two "), delta("half "), delta("a step "), void, delta("again")], 1)
    kept = without_discarded(mixed)
    assert [sequence for _, sequence in kept] == [1, 2, 5, 6]
    assert rebuild_partial_content(kept).text == "one two again"
