"""Approval requests and denials: mapped to the AI SDK's own events, accepted by the real clients."""

from __future__ import annotations

import msgspec
import pytest

from chat.ai_sdk.events import UIMessageChunk
from chat.ai_sdk.messages import partial_message
from chat.ai_sdk.partial import rebuild_partial_content
from chat.ai_sdk.replay import replay_events
from chat.ai_sdk.transformer import StreamTransformer
from streams.protocol import Chunk, TextDelta, ToolApprovalRequest, ToolOutputDenied, ToolStart
from streams.sse import DONE, encode_event
from tests.chat.ai_sdk.client import CLIENTS, ChatClient, sse_response

A = "run-1"
CALLS: list[Chunk] = [
    TextDelta(agent_id=A, timestamp=1, delta="I need your go-ahead."),
    ToolStart(agent_id=A, timestamp=1, tool_call_id="c1", tool_name="send_email", arguments={"to": "a@b.c"}),
    ToolApprovalRequest(agent_id=A, timestamp=1, tool_call_id="c1", approval_id="ap-1"),
    ToolStart(agent_id=A, timestamp=1, tool_call_id="c2", tool_name="delete_file", arguments={"path": "x"}),
    ToolApprovalRequest(agent_id=A, timestamp=1, tool_call_id="c2", approval_id="ap-2"),
    ToolOutputDenied(agent_id=A, timestamp=1, tool_call_id="c2", reason="expired"),
]


def events(chunks: list[Chunk]) -> list[UIMessageChunk]:
    transformer = StreamTransformer(message_id="msg-1")
    out = [event for chunk in chunks for event in transformer.transform(chunk)[0]]
    return out + transformer.finalize()


def test_approvals_map_to_the_sdk_events() -> None:
    wire = msgspec.to_builtins(events(CALLS))
    mapped = [e for e in wire if e["type"] in ("tool-approval-request", "tool-output-denied")]
    assert mapped == [
        {"type": "tool-approval-request", "approvalId": "ap-1", "toolCallId": "c1"},
        {"type": "tool-approval-request", "approvalId": "ap-2", "toolCallId": "c2"},
        {"type": "tool-output-denied", "toolCallId": "c2"},
    ]


def test_replay_and_partial_message_keep_the_approval_state() -> None:
    content = rebuild_partial_content(CALLS)
    replayed = msgspec.to_builtins(replay_events(content, lambda: "b1").events)
    assert [e["type"] for e in replayed if e["type"].startswith("tool-")] == [
        "tool-input-available",
        "tool-approval-request",
        "tool-input-available",
        "tool-approval-request",
        "tool-output-denied",
    ]
    parts = msgspec.to_builtins(partial_message(content, "msg-1"))["parts"]
    assert [(p.get("state"), p.get("approval")) for p in parts if p["type"] == "dynamic-tool"] == [
        ("approval-requested", {"id": "ap-1"}),
        ("output-denied", None),
    ]


@pytest.mark.parametrize("client", CLIENTS)
def test_the_real_clients_show_a_pending_and_a_denied_approval(chat_client: ChatClient, client: str) -> None:
    body = b"".join(encode_event(event) for event in events(CALLS)) + DONE
    answer = chat_client.run(client, [{"kind": "send", "text": "Mail it", "response": sse_response(body)}])
    assert answer["error"] is None and answer["errors"] == [], answer
    tools = [p for p in answer["messages"][-1]["parts"] if p["type"] == "dynamic-tool"]
    assert [(t["toolCallId"], t["state"]) for t in tools] == [("c1", "approval-requested"), ("c2", "output-denied")]
    assert tools[0]["approval"]["id"] == "ap-1"
