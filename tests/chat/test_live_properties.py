"""The server owns the truth, as a property: random conversations through the real client
against the Celery stack — sends, approvals, denials, client-tool answers, decisions sent again,
stops, reloads and second tabs — and after every turn what the page shows is what the snapshot
says, and no decision applied twice.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat.ai_sdk.messages import merge_assistant_messages
from chat.models import Message, PendingCall
from tests.chat.ai_sdk.client import ChatClient
from tests.chat.ai_sdk.scenario import content_view, ui_message

pytestmark = pytest.mark.django_db(transaction=True)

CHECK: dict[str, Any] = {"kind": "check"}
RESEND_REFUSED = {"kind": "resend-last-post", "expectStatus": 409, "expectCode": "DECISION_REJECTED"}


@st.composite
def email_turn(draw: st.DrawFn) -> list[dict[str, Any]]:
    """An email that needs approval: approved or denied, maybe after a reload, maybe sent twice."""
    turn: list[dict[str, Any]] = [
        {"kind": "send", "text": f"Email the team about {draw(st.sampled_from(['Q3', 'lunch']))}"}
    ]
    if draw(st.booleans()):
        turn.append({"kind": "refresh"})
    approved = draw(st.booleans())
    turn.append({"kind": "approve", "approved": approved, **({} if approved else {"reason": "not now"})})
    if draw(st.booleans()):
        turn.append(RESEND_REFUSED)
    return turn


@st.composite
def location_turn(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A client tool the page answers, maybe after a reload, maybe answered twice."""
    turn: list[dict[str, Any]] = [{"kind": "send", "text": "Where am I?"}]
    if draw(st.booleans()):
        turn.append({"kind": "refresh"})
    turn.append(
        {"kind": "tool-output", "tool": "get_location", "output": {"city": draw(st.sampled_from(["Porto", "Braga"]))}}
    )
    if draw(st.booleans()):
        turn.append(RESEND_REFUSED)
    return turn


def answer_turns() -> st.SearchStrategy[list[dict[str, Any]]]:
    """Plain answers: sent, stopped (perhaps after they ended), dropped and reloaded, or joined by
    a second tab (the research agent's answers last long enough to be joined)."""
    short = {"text": "Tell me something about streams", "agent": "chat"}
    long = {"text": "How do streams resume?", "agent": "research"}
    return st.sampled_from(
        [
            [{"kind": "send", **short}],
            [{"kind": "send-and-stop", "afterMs": 60, "mayMiss": True, **short}],
            [
                {"kind": "send-and-drop", "afterMs": 30, "untilText": True, **long},
                {"kind": "refresh"},
                {"kind": "wait-for-end"},
            ],
            [{"kind": "second-tab-sends", "secondText": "Hello?", "afterMs": 30, **long}],
        ]
    )


conversations = st.lists(st.one_of(email_turn(), location_turn(), answer_turns()), min_size=2, max_size=4)


def shown(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a page shows, compared by content: its consecutive assistant messages merged. An
    assistant message without parts shows nothing (the client opens one on a run's ``start``; a
    stop before the run's first token stores none)."""
    visible = [message for message in messages if message["role"] != "assistant" or message["parts"]]
    merged = merge_assistant_messages([ui_message(message) for message in visible])
    return [content_view(msgspec.to_builtins(message)) for message in merged]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=conversations)
def test_what_the_page_shows_is_what_the_server_stored(
    live_client: ChatClient, helix_server: str, token: str, turns: list[list[dict[str, Any]]]
) -> None:
    session_id = str(uuid.uuid4())
    actions = [action for turn in turns for action in [*turn, CHECK]]
    answer = live_client.run("v6", actions, baseUrl=helix_server, sessionId=session_id, token=token, agent="assistant")
    assert answer["errors"] == [] and answer["error"] is None, answer
    assert len(answer["checks"]) == len(turns)
    for check in answer["checks"]:
        assert check["snapshot"]["status"] == "ended", check["snapshot"]
        assert shown(check["messages"]) == shown(check["snapshot"]["messages"])
    for call in PendingCall.objects.filter(session_id=session_id):
        assert call.status != "pending" and call.decided_at is not None
        results = Message.objects.filter(session_id=session_id, role="tool", tool_call_id=call.tool_call_id)
        assert results.count() == 1, f"the decision on {call.tool_call_id} applied {results.count()} times"
