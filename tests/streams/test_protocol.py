"""The chunk protocol: every type, its exact wire fields, and strict validation."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from streams import protocol
from streams.exceptions import ChunkValidationError, ValidationError
from streams.protocol import (
    CHUNK_TYPES,
    ErrorChunk,
    StatePatch,
    StoredChunk,
    StreamChunkEvent,
    StreamEndEvent,
    StreamFailEvent,
    TextDelta,
    ToolStart,
    dump_chunk,
    encode_chunk,
    parse_chunk,
    stored_chunks,
)

BASE = {"agentId": "run-1", "agentType": "assistant", "timestamp": 1702329600000}

WIRE_EXAMPLES: dict[str, dict[str, object]] = {
    "text_delta": {"delta": "Hello, "},
    "thinking": {"content": "Let me think", "isComplete": True},
    "tool_start": {"toolCallId": "call_1", "toolName": "web_search", "arguments": {"query": "django"}},
    "tool_end": {"toolCallId": "call_1", "result": {"hits": 3}, "success": False, "error": "boom"},
    "tool_arg_stream_start": {"toolCallId": "call_1", "toolName": "web_search"},
    "tool_arg_stream_delta": {"toolCallId": "call_1", "delta": '{"query": "dj'},
    "tool_arg_stream_end": {"toolCallId": "call_1", "toolName": "web_search", "arguments": {"query": "django"}},
    "tool_input_error": {"toolCallId": "call_1", "toolName": "web_search", "input": "{bad", "error": "not JSON"},
    "tool_output_error": {"toolCallId": "call_1", "toolName": "web_search", "error": "timed out"},
    "subagent_start": {"step": 2, "subAgentType": "researcher", "subSessionId": "sub-1", "callId": "call_2"},
    "subagent_end": {
        "step": 2,
        "subAgentType": "researcher",
        "subSessionId": "sub-1",
        "callId": "call_2",
        "result": {"summary": "done"},
    },
    "custom": {"eventName": "search_progress", "data": {"processed": 50, "total": 100}},
    "state_patch": {
        "patches": [
            {"op": "add", "path": "/notes/-", "value": {"content": "Note 1"}},
            {"op": "replace", "path": "/searchCount", "value": 5},
            {"op": "remove", "path": "/draft"},
        ]
    },
    "error": {"error": "Rate limited", "code": "provider_rate_limited", "recoverable": True, "step": 3},
    "output": {"output": {"answer": 42}},
    "run_interrupted": {"runId": "r1", "step": 2, "reason": "user_stop"},
    "run_resumed": {"runId": "r1", "step": 3, "reason": "approval"},
    "run_paused": {"runId": "r1", "step": 3, "reason": "approval", "pendingToolCallIds": ["call_9"]},
    "checkpoint_created": {"runId": "r1", "checkpointId": "cp-1", "step": 3, "messageCount": 7},
    "step_committed": {"runId": "r1", "step": 3, "messageCount": 7},
    "step_discarded": {
        "runId": "r1",
        "step": 4,
        "attempt": 1,
        "fromSequence": 40,
        "toSequence": 52,
        "reason": "worker_lost",
    },
    "stream_resync": {
        "runId": "r1",
        "reason": "worker_lost",
        "attempt": 2,
        "checkpointId": "cp-1",
        "lastGoodSequence": 39,
    },
    "executor_superseded": {"runId": "r1", "epoch": 1, "currentEpoch": 2},
    "tool_approval_request": {"toolCallId": "c1", "approvalId": "ap-1"},
    "tool_output_denied": {"toolCallId": "c1", "reason": "not now"},
}

DESIGN_TYPES = {
    "text_delta", "thinking", "tool_start", "tool_end", "subagent_start", "subagent_end", "custom",
    "state_patch", "error", "output", "tool_arg_stream_start", "tool_arg_stream_delta",
    "tool_arg_stream_end", "tool_input_error", "tool_output_error", "run_interrupted", "run_resumed",
    "run_paused", "checkpoint_created", "step_committed", "step_discarded", "stream_resync",
    "executor_superseded",
}  # fmt: skip
HUMAN_IN_THE_LOOP_TYPES = {"tool_approval_request", "tool_output_denied"}  # beyond the design's list


def wire(kind: str) -> dict[str, object]:
    return {"type": kind, **BASE, **WIRE_EXAMPLES[kind]}


def test_every_design_chunk_type_exists() -> None:
    assert set(CHUNK_TYPES) == DESIGN_TYPES | HUMAN_IN_THE_LOOP_TYPES
    assert set(WIRE_EXAMPLES) == DESIGN_TYPES | HUMAN_IN_THE_LOOP_TYPES


@pytest.mark.parametrize("kind", sorted(DESIGN_TYPES))
def test_wire_round_trip_is_exact(kind: str) -> None:
    data = wire(kind)
    chunk = parse_chunk(data)
    assert isinstance(chunk, CHUNK_TYPES[kind])
    assert dump_chunk(chunk) == data
    assert parse_chunk(json.dumps(data)) == chunk
    assert parse_chunk(json.dumps(data).encode()) == chunk
    typed, payload = encode_chunk(chunk)
    assert typed == chunk and json.loads(payload) == data


@pytest.mark.parametrize("kind", sorted(DESIGN_TYPES))
def test_unknown_field_is_rejected_for_every_type(kind: str) -> None:
    with pytest.raises(ChunkValidationError) as info:
        parse_chunk({**wire(kind), "sequence": 5})
    assert info.value.field == "sequence"


def test_python_attributes_are_snake_case_and_wire_is_camel_case() -> None:
    chunk = parse_chunk(wire("thinking"))
    assert chunk.agent_id == "run-1" and chunk.is_complete is True  # type: ignore[union-attr]
    start = ToolStart(agent_id="a", timestamp=1, tool_call_id="c", tool_name="t", arguments=[1])
    assert dump_chunk(start) == {
        "type": "tool_start",
        "agentId": "a",
        "timestamp": 1,
        "toolCallId": "c",
        "toolName": "t",
        "arguments": [1],
    }


def test_required_fields_are_written_at_their_usual_values_and_optional_ones_left_out() -> None:
    end = protocol.ToolEnd(agent_id="a", timestamp=1, tool_call_id="c", result=None, success=True)
    assert (
        encode_chunk(end)[1]
        == b'{"type":"tool_end","toolCallId":"c","result":null,"success":true,"agentId":"a","timestamp":1}'
    )
    thinking = protocol.Thinking(agent_id="a", timestamp=1, content="", is_complete=False)
    assert b'"isComplete":false' in encode_chunk(thinking)[1]
    with pytest.raises(ChunkValidationError) as info:
        parse_chunk({"type": "tool_end", "toolCallId": "c", "result": 1, "agentId": "a", "timestamp": 1})
    assert info.value.field == "success"


def documented_examples() -> list[str]:
    """The chunk examples of ``docs/protocol.md``, one JSON object per line."""
    text = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()
    block = text.split("## Examples", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    return block.strip().splitlines()


def test_the_documentation_has_one_example_of_every_type() -> None:
    assert sorted(json.loads(line)["type"] for line in documented_examples()) == sorted(CHUNK_TYPES)


@pytest.mark.parametrize("line", documented_examples(), ids=lambda line: json.loads(line)["type"])
def test_documented_examples_round_trip_byte_for_byte(line: str) -> None:
    compact = json.dumps(json.loads(line), separators=(",", ":"), ensure_ascii=False).encode()
    assert encode_chunk(parse_chunk(line))[1] == compact


@pytest.mark.parametrize("line", documented_examples(), ids=lambda line: json.loads(line)["type"])
def test_every_field_the_examples_show_but_the_optional_ones_is_required(line: str) -> None:
    data = json.loads(line)
    cls = CHUNK_TYPES[data["type"]]
    optional = {field.encode_name for field in msgspec.structs.fields(cls) if not field.required}
    for key in data.keys() - {"type"} - optional:
        with pytest.raises(ChunkValidationError) as info:
            parse_chunk({k: v for k, v in data.items() if k != key})
        assert info.value.field == key


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"type": "nope", "agentId": "a", "timestamp": 1}, "type", "Unknown chunk type"),
        ({"agentId": "a", "timestamp": 1, "delta": "x"}, "type", "missing"),
        ({"type": "text_delta", "agentId": "a", "timestamp": 1}, "delta", "missing"),
        ({"type": "text_delta", "timestamp": 1, "delta": "x"}, "agentId", "missing"),
        ({"type": "text_delta", "agentId": "a", "timestamp": 1, "delta": 5}, "delta", "Expected `str`"),
        ({"type": "text_delta", "agentId": "a", "timestamp": "now", "delta": "x"}, "timestamp", "Expected `int`"),
        ({"type": "text_delta", "agentId": "a", "timestamp": True, "delta": "x"}, "timestamp", "Expected `int`"),
        ({"type": "error", "agentId": "a", "timestamp": 1, "error": "x", "step": 1}, "recoverable", "missing"),
        (
            {"type": "state_patch", "agentId": "a", "timestamp": 1, "patches": [{"op": "move", "path": "/a"}]},
            "patches[0].op",
            "move",
        ),
        (
            {"type": "state_patch", "agentId": "a", "timestamp": 1, "patches": [{"op": "add"}]},
            "patches[0].path",
            "missing",
        ),
        (
            {"type": "run_paused", "agentId": "a", "timestamp": 1, "runId": "r", "step": 1, "reason": "bored"},
            "reason",
            "bored",
        ),
    ],
)
def test_invalid_chunks_name_the_bad_field(data: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(ChunkValidationError) as info:
        parse_chunk(data)
    assert info.value.field == field
    assert words in str(info.value)
    assert isinstance(info.value, ValidationError)
    assert info.value.code == "VALIDATION_ERROR" and info.value.status_code == 400


@pytest.mark.parametrize("raw", [b"{not json", "", "[]", 42, None, ["text_delta"]])
def test_non_chunks_are_rejected(raw: object) -> None:
    with pytest.raises(ChunkValidationError):
        parse_chunk(raw)  # type: ignore[arg-type]


def test_a_constructed_chunk_with_wrong_types_is_caught() -> None:
    bad = TextDelta(agent_id="a", timestamp=1, delta=5)  # type: ignore[arg-type]
    with pytest.raises(ChunkValidationError) as info:
        encode_chunk(bad)
    assert info.value.field == "delta"


def test_decode_chunks_decodes_a_batch() -> None:
    payloads = [json.dumps(wire("text_delta")).encode(), json.dumps(wire("output")).encode()]
    chunks = protocol.decode_chunks(payloads)
    assert [type(c).__name__ for c in chunks] == ["TextDelta", "OutputChunk"]
    assert protocol.decode_chunks([]) == []


def test_type_guards() -> None:
    text = parse_chunk(wire("text_delta"))
    assert protocol.is_text_delta_chunk(text) and protocol.is_chunk(text)
    assert not protocol.is_tool_start_chunk(text)
    guards: dict[str, Callable[[object], bool]] = {
        "thinking": protocol.is_thinking_chunk,
        "tool_start": protocol.is_tool_start_chunk,
        "tool_end": protocol.is_tool_end_chunk,
        "subagent_start": protocol.is_subagent_start_chunk,
        "subagent_end": protocol.is_subagent_end_chunk,
        "custom": protocol.is_custom_event_chunk,
        "state_patch": protocol.is_state_patch_chunk,
        "error": protocol.is_error_chunk,
        "output": protocol.is_output_chunk,
    }
    for kind, guard in guards.items():
        assert guard(parse_chunk(wire(kind)))
        assert not guard(text)
    assert not protocol.is_chunk({"type": "text_delta"})


def test_wire_events() -> None:
    chunk = parse_chunk(wire("text_delta"))
    event = StreamChunkEvent(chunk=chunk, sequence=7)
    assert json.loads(msgspec.json.encode(event)) == {"type": "chunk", "chunk": wire("text_delta"), "sequence": 7}
    assert json.loads(msgspec.json.encode(StreamEndEvent())) == {"type": "end"}
    assert json.loads(msgspec.json.encode(StreamFailEvent(error="x"))) == {"type": "fail", "error": "x"}
    decoded = msgspec.json.decode(msgspec.json.encode(event), type=protocol.StreamEvent)
    assert decoded == event


def test_stored_chunks_are_plain_pairs_the_collector_lets_go() -> None:
    chunks = [parse_chunk(wire("text_delta")), parse_chunk(wire("state_patch"))]
    pairs: list[StoredChunk] = stored_chunks(chunks, 7)
    assert pairs == [(chunks[0], 7), (chunks[1], 8)]
    assert stored_chunks(chunks[:1], 3) == [(chunks[0], 3)]
    # Plain tuples of untracked chunks: a collection stops tracking them, so the tens of thousands
    # a replay holds are not walked by every later one.
    assert all(type(pair) is tuple for pair in pairs)
    gc.collect()
    assert not any(gc.is_tracked(pair) for pair in pairs)


def test_error_chunk_fields() -> None:
    chunk = ErrorChunk(agent_id="a", timestamp=1, error="x", recoverable=False, step=2)
    assert dump_chunk(chunk) == {
        "type": "error",
        "agentId": "a",
        "timestamp": 1,
        "error": "x",
        "recoverable": False,
        "step": 2,
    }


def test_state_patch_operations_are_typed() -> None:
    chunk = parse_chunk(wire("state_patch"))
    assert isinstance(chunk, StatePatch)
    assert [p.op for p in chunk.patches] == ["add", "replace", "remove"]


def test_wire_events_are_validated_as_strictly_as_chunks() -> None:
    line = '{"type":"chunk","chunk":{"type":"text_delta","delta":"Hi","agentId":"a","timestamp":1},"sequence":12}'
    event = protocol.parse_stream_event(line)
    assert isinstance(event, StreamChunkEvent) and event.sequence == 12 and isinstance(event.chunk, TextDelta)
    assert isinstance(protocol.parse_stream_event({"type": "end"}), StreamEndEvent)
    assert protocol.parse_stream_event(b'{"type":"fail","error":"down"}') == StreamFailEvent(error="down")
    cases: list[tuple[dict[str, object], str | None]] = [
        ({"type": "chunk", "chunk": {"type": "text_delta", "agentId": "a", "timestamp": 1}}, "chunk.delta"),
        ({"type": "fail"}, "error"),
        ({"type": "end", "extra": 1}, None),
    ]
    for bad, field in cases:
        with pytest.raises(ChunkValidationError) as info:
            protocol.parse_stream_event(bad)
        if field is not None:
            assert info.value.field == field
