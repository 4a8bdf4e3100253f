"""Reading a chat POST body, without a server: both body shapes, continuations, regenerations and
every way a body is refused."""

from __future__ import annotations

from typing import Any

import pytest

from chat.http.parsing import ChatInput, Limits, parse_chat_body, tool_answers
from chat.state.approvals import ToolAnswer
from streams.exceptions import ValidationError

LIMITS = Limits(max_message_chars=50, max_messages=3)


def user(text: str, id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text}]}


def parse(body: Any) -> ChatInput:
    return parse_chat_body(body, LIMITS)


def test_the_ai_sdk_shape_takes_the_last_user_message() -> None:
    body = {"id": "s", "messages": [user("hi", "u0"), user("what now?")], "trigger": "submit-message"}
    assert parse(body) == ChatInput(None, "what now?", user_message_id="u1")


def test_text_parts_are_joined_and_other_parts_ignored() -> None:
    message = {
        "id": "u1",
        "role": "user",
        "parts": [{"type": "text", "text": "a"}, {"type": "file"}, {"type": "text", "text": "b"}],
    }
    assert parse({"messages": [message]}).text == "ab"


def test_a_regeneration_answers_the_last_user_message_again() -> None:
    parsed = parse({"messages": [user("again")], "trigger": "regenerate-message", "agent": "assistant"})
    assert parsed == ChatInput("assistant", "again", user_message_id="u1", regenerate=True)


def test_a_last_assistant_message_continues_it_with_its_answers() -> None:
    assistant = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "text", "text": "let me check"},
            {
                "type": "tool-send_email",
                "toolCallId": "c1",
                "state": "approval-responded",
                "approval": {"id": "p1", "approved": False, "reason": "not now"},
            },
            {"type": "tool-locate", "toolCallId": "c2", "state": "output-available", "output": {"city": "Lisbon"}},
            {"type": "tool-locate", "toolCallId": "c3", "state": "output-error", "errorText": "no GPS"},
            {"type": "tool-locate", "toolCallId": "c4", "state": "input-available"},  # not answered: skipped
        ],
    }
    parsed = parse({"messages": [user("hi"), assistant]})
    assert parsed.text is None and parsed.continuation_of == "a1"
    assert parsed.answers == [
        ToolAnswer("c1", approval_id="p1", approved=False, reason="not now", state="approval-responded"),
        ToolAnswer("c2", output={"city": "Lisbon"}, state="output-available"),
        ToolAnswer("c3", error="no GPS", state="output-error"),
    ]


def test_the_seeds_shape_with_history_and_state() -> None:
    history = [{"role": "system", "content": "obey"}, {"role": "user", "content": "before"}]
    parsed = parse({"message": "hello", "messages": history, "state": {"n": 1}})
    assert parsed.text == "hello" and parsed.state == {"n": 1} and parsed.overrides == ["messages", "state"]
    # system messages are dropped, as the seeds do: the agent adds its own
    assert parsed.messages is not None and [(m.role, m.content) for m in parsed.messages] == [("user", "before")]
    assert parse({"message": "hello"}).overrides == []


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([], "JSON object"),
        ({"message": 3}, "message must be a string"),
        ({"message": "   "}, "message must not be empty"),
        ({"message": "x" * 51}, "longer than 50"),
        ({"message": "hi", "state": [1]}, "state must be an object"),
        ({"message": "hi", "messages": [{}] * 4}, "at most 3 messages"),
        ({"message": "hi", "messages": [{"role": "wizard", "content": ""}]}, "Invalid message"),
        ({"message": "hi", "agent": ""}, "agent must be"),
        ({"messages": []}, "non-empty list"),
        ({"messages": [user("a")] * 4}, "more than 3 messages"),
        ({"messages": ["hi"]}, "the user's new message or the assistant message it continues"),
        ({"messages": [{**user("obey"), "role": "system"}]}, "the user's new message"),
        ({"messages": [user("hi")], "state": "x"}, "state must be an object"),
        ({"messages": [user("hi")], "trigger": "resume-stream"}, "Unknown trigger"),
        ({"messages": [{"role": "assistant", "parts": []}]}, "has no id"),
        ({"messages": [user("")]}, "must not be empty"),
    ],
)
def test_bad_bodies_are_refused_naming_what_is_wrong(body: Any, says: str) -> None:
    with pytest.raises(ValidationError, match=says) as raised:
        parse(body)
    assert raised.value.code == "VALIDATION_ERROR" and raised.value.status_code == 400


def test_tool_answers_skip_parts_that_are_not_tool_answers() -> None:
    message = {
        "parts": [
            "not a part",
            {"type": "text", "text": "hi"},
            {"type": "tool-x", "state": "output-available"},  # no call id
            {"type": "dynamic-tool", "toolCallId": "d1", "state": "output-available", "output": 2},
        ]
    }
    assert tool_answers(message) == [ToolAnswer("d1", output=2, state="output-available")]
