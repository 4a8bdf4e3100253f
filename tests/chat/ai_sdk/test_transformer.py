"""The transformer, pinned event by event, and the SSE body it produces."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat.ai_sdk.events import DataChunk, FinishChunk, StartChunk, UIMessageChunk
from chat.ai_sdk.sse import ui_message_stream
from chat.ai_sdk.transformer import StreamTransformer
from streams.protocol import (
    CheckpointCreated,
    Chunk,
    CustomEvent,
    ErrorChunk,
    OutputChunk,
    PatchOperation,
    RunPaused,
    StatePatch,
    StepCommitted,
    StreamResync,
    SubAgentStart,
    TextDelta,
    Thinking,
    ToolArgStreamDelta,
    ToolArgStreamEnd,
    ToolArgStreamStart,
    ToolEnd,
    ToolInputError,
    ToolOutputError,
    ToolStart,
)
from streams.sse import DONE, encode_event

A = "run-1"


def wire(events: list[UIMessageChunk]) -> list[dict]:  # type: ignore[type-arg]
    """Events as the JSON objects the client parses (camelCase keys, unset fields left out)."""
    return msgspec.to_builtins(events)  # type: ignore[no-any-return]


def run(chunks: list[Chunk], **options: object) -> list[dict]:  # type: ignore[type-arg]
    transformer = StreamTransformer(message_id="m1", **options)  # type: ignore[arg-type]
    events = []
    for chunk in chunks:
        events += transformer.transform(chunk)[0]
    return wire(events + transformer.finalize())


def text(delta: str, agent: str = A) -> TextDelta:
    return TextDelta(agent_id=agent, timestamp=1, delta=delta)


def test_text_then_tool_then_text_opens_a_new_block() -> None:
    chunks: list[Chunk] = [
        text("Hel"),
        text("lo"),
        ToolStart(agent_id=A, timestamp=1, tool_call_id="c1", tool_name="search", arguments={"q": "x"}),
        ToolEnd(agent_id=A, timestamp=1, tool_call_id="c1", result=[1], success=True),
        text("Done"),
    ]
    assert run(chunks) == [
        {"type": "start", "messageId": "m1"},
        {"type": "text-start", "id": "text-1"},
        {"type": "text-delta", "id": "text-1", "delta": "Hel"},
        {"type": "text-delta", "id": "text-1", "delta": "lo"},
        {"type": "text-end", "id": "text-1"},
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "search",
            "input": {"q": "x"},
            "dynamic": True,
        },
        {"type": "tool-output-available", "toolCallId": "c1", "output": [1], "dynamic": True},
        {"type": "text-start", "id": "text-2"},
        {"type": "text-delta", "id": "text-2", "delta": "Done"},
        {"type": "text-end", "id": "text-2"},
        {"type": "finish"},
    ]


def test_reasoning_closes_when_complete_or_when_text_starts() -> None:
    chunks: list[Chunk] = [
        Thinking(agent_id=A, timestamp=1, content="a", is_complete=False),
        Thinking(agent_id=A, timestamp=1, content="b", is_complete=True),
        Thinking(agent_id=A, timestamp=1, content="c", is_complete=False),
        text("x"),
    ]
    assert run(chunks)[1:] == [
        {"type": "reasoning-start", "id": "reasoning-1"},
        {"type": "reasoning-delta", "id": "reasoning-1", "delta": "a"},
        {"type": "reasoning-delta", "id": "reasoning-1", "delta": "b"},
        {"type": "reasoning-end", "id": "reasoning-1"},
        {"type": "reasoning-start", "id": "reasoning-2"},
        {"type": "reasoning-delta", "id": "reasoning-2", "delta": "c"},
        {"type": "reasoning-end", "id": "reasoning-2"},
        {"type": "text-start", "id": "text-3"},
        {"type": "text-delta", "id": "text-3", "delta": "x"},
        {"type": "text-end", "id": "text-3"},
        {"type": "finish"},
    ]


def test_streamed_tool_arguments_and_dynamic_on_every_tool_event() -> None:
    chunks: list[Chunk] = [
        ToolArgStreamStart(agent_id=A, timestamp=1, tool_call_id="c1", tool_name="search"),
        ToolArgStreamDelta(agent_id=A, timestamp=1, tool_call_id="c1", delta='{"q":'),
        ToolArgStreamDelta(agent_id=A, timestamp=1, tool_call_id="c1", delta='"x"}'),
        ToolArgStreamEnd(agent_id=A, timestamp=1, tool_call_id="c1", tool_name="search", arguments={"q": "x"}),
        ToolStart(agent_id=A, timestamp=1, tool_call_id="c1", tool_name="search", arguments={"q": "x"}),
        ToolEnd(agent_id=A, timestamp=1, tool_call_id="c1", result=None, success=False, error="boom"),
        ToolInputError(agent_id=A, timestamp=1, tool_call_id="c2", tool_name="calc", input="{bad", error="not JSON"),
        ToolStart(agent_id=A, timestamp=1, tool_call_id="c3", tool_name="calc", arguments={}),
        ToolOutputError(agent_id=A, timestamp=1, tool_call_id="c3", error="timed out"),
    ]
    events = run(chunks)
    assert events[1:-1] == [
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "search", "dynamic": True},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"q":'},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '"x"}'},
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "search",
            "input": {"q": "x"},
            "dynamic": True,
        },
        {"type": "tool-output-error", "toolCallId": "c1", "errorText": "boom", "dynamic": True},
        {
            "type": "tool-input-error",
            "toolCallId": "c2",
            "toolName": "calc",
            "input": "{bad",
            "errorText": "not JSON",
            "dynamic": True,
        },
        {"type": "tool-input-available", "toolCallId": "c3", "toolName": "calc", "input": {}, "dynamic": True},
        {"type": "tool-output-error", "toolCallId": "c3", "errorText": "timed out", "dynamic": True},
    ]
    tool_events = [e for e in events if e["type"].startswith("tool-") and e["type"] != "tool-input-delta"]
    assert all(e["dynamic"] is True for e in tool_events)


def test_data_events_are_transient_and_sub_agents_are_not_parts() -> None:
    chunks: list[Chunk] = [
        text("a"),
        CustomEvent(agent_id=A, timestamp=1, event_name="progress", data={"p": 1}),
        StatePatch(agent_id=A, timestamp=1, patches=[PatchOperation(op="add", path="/x", value=1)]),
        SubAgentStart(
            agent_id=A, agent_type="main", timestamp=1, step=1, sub_agent_type="r", sub_session_id="s1", call_id="c"
        ),
        text("sub says", agent="s1"),
        OutputChunk(agent_id=A, timestamp=1, output={"ok": True}),
        StepCommitted(agent_id=A, timestamp=1, run_id="r", step=1, message_count=2),
        CheckpointCreated(agent_id=A, timestamp=1, run_id="r", checkpoint_id="cp", step=1, message_count=2),
        RunPaused(agent_id=A, timestamp=1, run_id="r", step=1, reason="approval", pending_tool_call_ids=["c"]),
        StreamResync(agent_id=A, timestamp=1, run_id="r", reason="worker_lost", attempt=2, last_good_sequence=4),
    ]
    data = [e for e in run(chunks) if e["type"].startswith("data-")]
    assert [e["type"] for e in data] == [
        "data-progress",
        "data-state-patch",
        "data-subagent-start",
        "data-subagent-chunk",
        "data-output",
        "data-step-committed",
        "data-checkpoint-created",
        "data-run-paused",
        "data-stream-resync",
    ]
    assert all(e["transient"] is True for e in data)
    assert data[0]["data"] == {"p": 1}
    assert data[1]["data"] == [{"op": "add", "path": "/x", "value": 1}]
    assert data[3]["data"]["delta"] == "sub says" and data[3]["data"]["agentId"] == "s1"
    assert data[8]["data"]["lastGoodSequence"] == 4
    assert all("sequence" not in e for e in run(chunks))


def test_an_error_closes_open_blocks_first() -> None:
    chunks: list[Chunk] = [
        Thinking(agent_id=A, timestamp=1, content="hm", is_complete=False),
        ErrorChunk(
            agent_id=A, timestamp=1, error="provider down", code="provider_overloaded", recoverable=True, step=1
        ),
    ]
    assert run(chunks)[1:] == [
        {"type": "reasoning-start", "id": "reasoning-1"},
        {"type": "reasoning-delta", "id": "reasoning-1", "delta": "hm"},
        {"type": "reasoning-end", "id": "reasoning-1"},
        {"type": "error", "errorText": "provider down"},
        {"type": "finish"},
    ]


def test_step_events_close_blocks_before_finish_step() -> None:
    chunks: list[Chunk] = [
        text("a"),
        StepCommitted(agent_id=A, timestamp=1, run_id="r", step=1, message_count=2),
        text("b"),
    ]
    types = [e["type"] for e in run(chunks, include_step_events=True)]
    assert types == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "data-step-committed",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]


def test_message_ids_filters_and_finalize() -> None:
    transformer = StreamTransformer(generate_message_id=lambda agent: f"msg-for-{agent}")
    assert transformer.finalize() == []  # nothing started: nothing to finish
    transformer = StreamTransformer(generate_message_id=lambda agent: f"msg-for-{agent}")
    events, sequence = transformer.transform(text("x"), 41)
    assert sequence == 41 and events[0] == StartChunk(message_id="msg-for-run-1")
    assert transformer.finalize("stop")[-1] == FinishChunk(finish_reason="stop")
    assert transformer.transform(text("late"))[0] == []
    no_custom = run(
        [CustomEvent(agent_id=A, timestamp=1, event_name="x", data=None), text("y")],
        chunk_filter=lambda c: c.agent_id != A or not isinstance(c, CustomEvent),
    )
    assert [e["type"] for e in no_custom] == ["start", "text-start", "text-delta", "text-end", "finish"]


def test_results_for_unknown_calls_are_skipped_with_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        events = run([ToolEnd(agent_id=A, timestamp=1, tool_call_id="ghost", result=1, success=True)])
    assert [e["type"] for e in events] == ["start", "finish"]
    assert "ghost" in caplog.text


def test_sse_framing() -> None:
    assert encode_event(StartChunk(message_id="m"), id=7) == b'id: 7\ndata: {"type":"start","messageId":"m"}\n\n'
    assert encode_event(FinishChunk()) == b'data: {"type":"finish"}\n\n'
    nan = DataChunk(type="data-x", data=[float("nan"), "a\nb"], transient=True)
    assert encode_event(nan) == b'data: {"type":"data-x","data":[null,"a\\nb"],"transient":true}\n\n'


async def test_sse_body_has_ids_on_stored_chunks_and_ends_with_done() -> None:
    async def source() -> AsyncIterator[tuple[Chunk, int]]:
        yield text("Hi"), 5
        yield text("!"), 6

    body = b"".join([part async for part in ui_message_stream(source(), StreamTransformer(message_id="m"))])
    assert body.endswith(b'data: {"type":"finish"}\n\ndata: [DONE]\n\n')
    events = body.split(b"\n\n")[:-1]
    assert events[0] == b'id: 5\ndata: {"type":"start","messageId":"m"}'
    assert events[3] == b'id: 6\ndata: {"type":"text-delta","id":"text-1","delta":"!"}'
    for event in events[:-1]:
        json.loads(event.split(b"data: ", 1)[1])


_chunks = st.lists(
    st.one_of(
        st.builds(
            text,
            st.one_of(st.text(max_size=8), st.sampled_from(["x", "ax", '"\\\n\u2028\x00é'])),
            st.sampled_from([A, A, A, "sub-1"]),
        ),
        st.builds(
            lambda c, done: Thinking(agent_id=A, timestamp=1, content=c, is_complete=done),
            st.text(max_size=4),
            st.booleans(),
        ),
        st.builds(
            lambda i: ToolStart(agent_id=A, timestamp=1, tool_call_id=f"c{i}", tool_name="t", arguments={}),
            st.integers(0, 3),
        ),
        st.builds(
            lambda i: StepCommitted(agent_id=A, timestamp=1, run_id="r", step=i, message_count=i), st.integers(1, 3)
        ),
    ),
    min_size=1,  # an empty batch is a keep-alive
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(chunks=_chunks, steps=st.booleans(), filtered=st.booleans())
async def test_the_body_frames_text_deltas_as_every_event_is_framed(
    chunks: list[Chunk], steps: bool, filtered: bool
) -> None:
    """The SSE body frames most text deltas without building the event: byte for byte what
    transforming each chunk and framing each event gives, whatever the text (quotes, escapes,
    line separators, NUL) and whatever came before (blocks, steps, sub-agents, a filter)."""
    options: dict[str, Any] = {"message_id": "m", "include_step_events": steps}
    if filtered:
        options["chunk_filter"] = lambda chunk: not (isinstance(chunk, TextDelta) and "x" in chunk.delta)

    async def batches() -> AsyncIterator[list[tuple[Chunk, int]]]:
        yield [(chunk, sequence) for sequence, chunk in enumerate(chunks, start=1)]

    body = b"".join([part async for part in ui_message_stream(batches(), StreamTransformer(**options))])
    reference = StreamTransformer(**options)
    events = [encode_event(e, id=s) for s, chunk in enumerate(chunks, start=1) for e in reference.transform(chunk)[0]]
    assert body == b"".join(events) + b"".join(encode_event(e) for e in reference.finalize()) + DONE


def test_a_chunk_given_as_a_dict_is_parsed_and_one_that_is_no_chunk_is_refused() -> None:
    from streams.exceptions import ChunkValidationError

    typed, plain = StreamTransformer(message_id="m1"), StreamTransformer(message_id="m1")
    chunk = text("Hi")
    as_dict = msgspec.to_builtins(chunk)
    assert plain.transform(as_dict, 3) == typed.transform(chunk, 3)
    assert plain.transform(as_dict, 4)[0] != []  # the second delta is an event too, not dropped
    with pytest.raises(ChunkValidationError):
        plain.transform({"type": "no-such-chunk"})
