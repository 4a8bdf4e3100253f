"""Storage messages → UI messages: every edge case of the conversion, merging and loading."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from chat.ai_sdk.loading import UIMessageStore, load_all_ui_messages, load_core_ui_messages, load_ui_messages
from chat.ai_sdk.messages import convert_to_core_ui_messages, convert_to_ui_messages, merge_assistant_messages
from chat.ai_sdk.state import InMemoryStateStore
from chat.ai_sdk.ui_messages import DynamicToolUIPart, TextUIPart, UIMessage
from streams.exceptions import ValidationError
from streams.messages import StoredMessage, ToolCall

SEARCH = ToolCall(id="tc1", name="search", arguments={"q": "django"})
CALC = ToolCall(id="tc2", name="calculate", arguments={"a": 1})


def wire(value: object) -> Any:
    """Messages as the JSON a client receives (camelCase keys, unset fields left out)."""
    return msgspec.to_builtins(value)


CONVERSATION = [
    StoredMessage(role="system", content="You are helpful."),
    StoredMessage(role="user", content="Find it", metadata={"source": "web"}),
    StoredMessage(role="assistant", content="Let me look.", reasoning="Need a search.", tool_calls=[SEARCH, CALC]),
    StoredMessage(role="tool", tool_call_id="tc1", content='{"hits": 3}'),
    StoredMessage(role="tool", tool_call_id="tc2", content="division by zero", metadata={"error": "division by zero"}),
    StoredMessage(role="tool", tool_call_id="orphan", content='{"lost": true}'),
    StoredMessage(role="assistant", content="Found 3."),
]


def test_conversion_rules() -> None:
    messages = wire(convert_to_ui_messages(CONVERSATION))
    assert messages == [
        {"id": "msg-0", "role": "system", "parts": [{"type": "text", "text": "You are helpful."}]},
        {"id": "msg-1", "role": "user", "parts": [{"type": "text", "text": "Find it"}], "metadata": {"source": "web"}},
        {
            "id": "msg-2",
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "text": "Need a search.", "state": "done"},
                {"type": "text", "text": "Let me look.", "state": "done"},
                {
                    "type": "dynamic-tool",
                    "toolName": "search",
                    "toolCallId": "tc1",
                    "input": {"q": "django"},
                    "state": "output-available",
                    "output": {"hits": 3},
                },
                {
                    "type": "dynamic-tool",
                    "toolName": "calculate",
                    "toolCallId": "tc2",
                    "input": {"a": 1},
                    "state": "output-error",
                    "errorText": "division by zero",
                },
            ],
        },
        {"id": "msg-6", "role": "assistant", "parts": [{"type": "text", "text": "Found 3.", "state": "done"}]},
    ]
    assert all(m["role"] != "tool" for m in messages)  # merged, never on their own; the orphan is dropped


def test_pending_tools_malformed_results_and_options() -> None:
    messages = [
        StoredMessage(role="assistant", id="a1", tool_calls=[SEARCH, CALC]),
        StoredMessage(role="tool", tool_call_id="tc1", content="not json {"),
    ]
    [message] = wire(convert_to_ui_messages(messages, generate_id=lambda i, m: f"x{i}"))
    assert message["id"] == "a1"  # a stored id wins over generated ones
    search, calc = message["parts"]
    assert (search["state"], search["output"]) == ("output-available", "not json {")
    assert calc["state"] == "input-available" and "output" not in calc
    [without] = wire(convert_to_ui_messages(messages, include_tool_results=False))
    assert [p["state"] for p in without["parts"]] == ["input-available", "input-available"]
    [static] = wire(convert_to_ui_messages(messages, tool_parts="static"))
    assert static["parts"][0]["type"] == "tool-search" and "toolName" not in static["parts"][0]
    reasoning = [StoredMessage(role="assistant", content="x", reasoning="why")]
    assert [p["type"] for p in wire(convert_to_ui_messages(reasoning, include_reasoning=False))[0]["parts"]] == ["text"]
    assert convert_to_ui_messages([StoredMessage(role="assistant", tool_calls=[SEARCH])])[0].parts == [
        DynamicToolUIPart("search", tool_call_id="tc1", state="input-available", input={"q": "django"})
    ]


def test_core_format() -> None:
    core = wire(
        convert_to_core_ui_messages(
            [*CONVERSATION[2:5], StoredMessage(role="assistant", tool_calls=[ToolCall(id="tc9", name="wait")])]
        )
    )
    tools = [p for m in core for p in m["parts"] if p["type"] == "tool-invocation"]
    assert [(t["toolCallId"], t["state"]) for t in tools] == [
        ("tc1", "completed"),
        ("tc2", "error"),
        ("tc9", "pending"),
    ]
    assert tools[0]["output"] == {"hits": 3} and tools[1]["error"] == "division by zero"
    assert core[0]["parts"][0] == {"type": "reasoning", "text": "Need a search."}


def test_merge_assistant_messages() -> None:
    tool = DynamicToolUIPart("search", tool_call_id="t1", state="output-available", input={}, output=1)
    messages = [
        UIMessage(id="u", role="user", parts=[TextUIPart(text="q")]),
        UIMessage(id="a1", role="assistant", parts=[TextUIPart(text=""), tool], metadata={"first": True}),
        UIMessage(
            id="a2",
            role="assistant",
            parts=[msgspec.structs.replace(tool, state="input-available"), TextUIPart(text="ok")],
        ),
        UIMessage(id="a3-partial", role="assistant", parts=[TextUIPart(text="more")], metadata={"x": 1}),
        UIMessage(id="u2", role="user", parts=[TextUIPart(text="next")]),
    ]
    merged = merge_assistant_messages(messages)
    assert [m.id for m in merged] == ["u", "a1-partial", "u2"]
    assert merged[1].parts == [tool, TextUIPart(text="ok"), TextUIPart(text="more")]
    assert merged[1].metadata == {"first": True}
    keep_all = merge_assistant_messages(messages, deduplicate_tools=False, filter_empty_text=False)
    assert len(keep_all[1].parts) == 5
    assert (messages[1].id, messages[1].parts[0]) == ("a1", TextUIPart(text=""))  # inputs are not modified
    assert len(messages[1].parts) == 2


@pytest.fixture
def store() -> InMemoryStateStore:
    store = InMemoryStateStore()
    store.create_session("s")
    store.append_messages("s", CONVERSATION)
    return store


async def test_paginated_loading(store: InMemoryStateStore) -> None:
    first, more = await load_ui_messages(store, "s", offset=0, limit=3)
    assert more is True and [m.id for m in first] == ["msg-0", "msg-1", "msg-2"]
    assert wire(first[2])["parts"][2]["state"] == "input-available"  # its result is on the next page
    rest, more = await load_ui_messages(store, "s", offset=3, limit=50)
    assert more is False and [m.id for m in rest] == ["msg-6"]
    assert await load_ui_messages(store, "unknown") == ([], False)
    for bad in ({"offset": -1}, {"limit": 0}, {"limit": 10_000}, {"offset": "1"}):
        with pytest.raises(ValidationError):
            await load_ui_messages(store, "s", **bad)


async def test_load_all_never_splits_a_call_from_its_result(store: InMemoryStateStore) -> None:
    many = InMemoryStateStore()
    many.create_session("s")
    for index in range(600):  # more than one page of the loader
        call = ToolCall(id=f"c{index}", name="t")
        many.append_messages("s", [StoredMessage(role="assistant", tool_calls=[call])])
        many.append_messages("s", [StoredMessage(role="tool", tool_call_id=f"c{index}", content=str(index))])
    messages = wire(await load_all_ui_messages(many, "s"))
    assert len(messages) == 600
    assert all(m["parts"][0]["state"] == "output-available" for m in messages)
    core = wire(await load_core_ui_messages(store, "s"))
    assert core[2]["parts"][2]["state"] == "completed"
    wrapper = UIMessageStore(store, include_reasoning=False)
    assert wire(await wrapper.get_all_ui_messages("s"))[2]["parts"][0]["type"] == "text"
    page, more = await wrapper.get_ui_messages("s", 0, 2)
    assert len(page) == 2 and more
    assert wire(await wrapper.get_core_ui_messages("s"))[2]["parts"][1]["type"] == "tool-invocation"
