"""Agent runs for the bridge tests: one description, two views of it.

A :class:`RunSpec` describes what a run did step by step; :func:`build_run` turns it into the
chunk stream a runtime writes and the storage messages it persists, the way the runtime does it:
after each step the step's messages are committed, then ``step_committed`` is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from hypothesis import strategies as st

from streams.messages import StoredMessage, ToolCall
from streams.protocol import (
    Chunk,
    CustomEvent,
    OutputChunk,
    PatchOperation,
    StatePatch,
    StepCommitted,
    SubAgentEnd,
    SubAgentStart,
    TextDelta,
    Thinking,
    ToolArgStreamDelta,
    ToolArgStreamEnd,
    ToolArgStreamStart,
    ToolEnd,
    ToolInputError,
    ToolStart,
)

Outcome = Literal["ok", "fail", "bad_input"]


@dataclass
class ToolSpec:
    call_id: str
    name: str
    arguments: dict[str, Any]
    result: Any = None
    outcome: Outcome = "ok"
    subagent: bool = False
    progress: bool = False


@dataclass
class StepSpec:
    reasoning: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    tools: list[ToolSpec] = field(default_factory=list)
    streamed_arguments: bool = False  # a model streams the arguments of all its calls, or none
    patch: bool = False


@dataclass
class RunSpec:
    steps: list[StepSpec]
    agent_id: str = "run-1"
    message_id: str = "msg-run-1"


@dataclass
class BuiltRun:
    chunks: list[Chunk]
    # messages committed by each step, and the index in ``chunks`` of its step_committed chunk
    steps: list[tuple[list[StoredMessage], int]]

    @property
    def messages(self) -> list[StoredMessage]:
        return [message for committed, _ in self.steps for message in committed]


def _raw_arguments(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, separators=(",", ":"))


def build_run(spec: RunSpec, message_count_before: int) -> BuiltRun:
    """The chunks and storage messages of ``spec`` (``message_count_before`` messages precede it)."""
    agent = spec.agent_id
    chunks: list[Chunk] = []
    steps: list[tuple[list[StoredMessage], int]] = []
    count = message_count_before
    for number, step in enumerate(spec.steps, start=1):
        for index, piece in enumerate(step.reasoning):
            last = index == len(step.reasoning) - 1
            chunks.append(Thinking(agent_id=agent, timestamp=1, content=piece, is_complete=last))
        chunks += [TextDelta(agent_id=agent, timestamp=1, delta=piece) for piece in step.text]
        calls: list[ToolCall] = []
        for tool in step.tools:
            raw = _raw_arguments(tool.arguments)
            arguments: Any = raw[:-1] if tool.outcome == "bad_input" else tool.arguments
            if step.streamed_arguments:
                text = raw[:-1] if tool.outcome == "bad_input" else raw
                chunks.append(
                    ToolArgStreamStart(agent_id=agent, timestamp=1, tool_call_id=tool.call_id, tool_name=tool.name)
                )
                for cut in range(0, len(text), 7):
                    delta = text[cut : cut + 7]
                    chunks.append(
                        ToolArgStreamDelta(agent_id=agent, timestamp=1, tool_call_id=tool.call_id, delta=delta)
                    )
                if tool.outcome != "bad_input":
                    chunks.append(
                        ToolArgStreamEnd(
                            agent_id=agent,
                            timestamp=1,
                            tool_call_id=tool.call_id,
                            tool_name=tool.name,
                            arguments=arguments,
                        )
                    )
            calls.append(ToolCall(id=tool.call_id, name=tool.name, arguments=arguments))
        for tool in step.tools:
            if tool.outcome == "bad_input":
                chunks.append(
                    ToolInputError(
                        agent_id=agent,
                        timestamp=1,
                        tool_call_id=tool.call_id,
                        tool_name=tool.name,
                        input=_raw_arguments(tool.arguments)[:-1],
                        error="arguments are not valid JSON",
                    )
                )
            else:
                chunks.append(
                    ToolStart(
                        agent_id=agent,
                        timestamp=1,
                        tool_call_id=tool.call_id,
                        tool_name=tool.name,
                        arguments=tool.arguments,
                    )
                )
        for tool in step.tools:
            if tool.outcome == "bad_input":
                continue
            if tool.progress:
                chunks.append(
                    CustomEvent(agent_id=agent, timestamp=1, event_name="progress", data={"call": tool.call_id})
                )
            if tool.subagent:
                sub = f"sub-{tool.call_id}"
                common: dict[str, Any] = {
                    "step": number,
                    "sub_agent_type": "helper",
                    "sub_session_id": sub,
                    "call_id": tool.call_id,
                }
                chunks.append(SubAgentStart(agent_id=agent, agent_type="assistant", timestamp=1, **common))
                chunks.append(TextDelta(agent_id=sub, agent_type="helper", timestamp=1, delta="working on it"))
                chunks.append(
                    SubAgentEnd(agent_id=agent, agent_type="assistant", timestamp=1, result=tool.result, **common)
                )
        for tool in step.tools:
            if tool.outcome == "ok":
                chunks.append(
                    ToolEnd(agent_id=agent, timestamp=1, tool_call_id=tool.call_id, result=tool.result, success=True)
                )
            elif tool.outcome == "fail":
                chunks.append(
                    ToolEnd(
                        agent_id=agent,
                        timestamp=1,
                        tool_call_id=tool.call_id,
                        result=None,
                        success=False,
                        error="tool broke",
                    )
                )
        if step.patch:
            patch = [PatchOperation(op="replace", path="/step", value=number)]
            chunks.append(StatePatch(agent_id=agent, timestamp=1, patches=patch))
        committed = [
            StoredMessage(
                role="assistant",
                id=spec.message_id,
                content="".join(step.text),
                reasoning="".join(step.reasoning) or None,
                tool_calls=calls,
            )
        ]
        for tool in step.tools:
            if tool.outcome == "ok":
                committed.append(StoredMessage(role="tool", tool_call_id=tool.call_id, content=json.dumps(tool.result)))
            else:
                error = "tool broke" if tool.outcome == "fail" else "arguments are not valid JSON"
                committed.append(
                    StoredMessage(role="tool", tool_call_id=tool.call_id, content=error, metadata={"error": error})
                )
        count += len(committed)
        chunks.append(StepCommitted(agent_id=agent, timestamp=1, run_id=agent, step=number, message_count=count))
        steps.append((committed, len(chunks) - 1))
    chunks.append(OutputChunk(agent_id=agent, timestamp=1, output={"steps": len(spec.steps)}))
    return BuiltRun(chunks, steps)


# -- hypothesis strategies ---------------------------------------------------------------------

_words = st.text(alphabet="abcdefghij klmnopé✓\n\"'", min_size=1, max_size=12)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text("abcxyz", max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def tool_specs(draw: st.DrawFn, call_id: str) -> ToolSpec:
    return ToolSpec(
        call_id=call_id,
        name=draw(st.sampled_from(["search", "calculate", "lookup_order"])),
        arguments=draw(st.dictionaries(st.sampled_from(["q", "n", "filters"]), _json_values, min_size=1, max_size=2)),
        result=draw(_json_values),
        outcome=draw(st.sampled_from(["ok", "ok", "ok", "fail", "bad_input"])),
        subagent=draw(st.booleans()),
        progress=draw(st.booleans()),
    )


@st.composite
def run_specs(draw: st.DrawFn, run_number: int = 1) -> RunSpec:
    tool_steps = draw(st.integers(0, 2))
    steps: list[StepSpec] = []
    calls = 0
    for index in range(tool_steps + 1):
        last = index == tool_steps
        count = 0 if last else draw(st.integers(1, 3))
        tools = []
        for _ in range(count):
            calls += 1
            tools.append(draw(tool_specs(f"call-{run_number}-{calls}")))
        steps.append(
            StepSpec(
                reasoning=draw(st.lists(_words, max_size=3)),
                text=draw(st.lists(_words, min_size=1 if last else 0, max_size=4)),
                tools=tools,
                streamed_arguments=draw(st.booleans()),
                patch=draw(st.booleans()),
            )
        )
    return RunSpec(steps=steps, agent_id=f"run-{run_number}", message_id=f"msg-run-{run_number}")


def chunk_of(kind: str, agent: str, index: int) -> Chunk:
    """A chunk of ``kind`` (text, thinking, call, end of the previous call) by ``agent``."""
    if kind == "text":
        return TextDelta(agent_id=agent, timestamp=1, delta=f"t{index} ")
    if kind == "thinking":
        return Thinking(agent_id=agent, timestamp=1, content=f"r{index} ", is_complete=index % 3 == 0)
    if kind == "call":
        return ToolStart(agent_id=agent, timestamp=1, tool_call_id=f"c{index}", tool_name="search", arguments={})
    return ToolEnd(agent_id=agent, timestamp=1, tool_call_id=f"c{index - 1}", result=index, success=True)
