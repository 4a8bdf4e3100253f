"""Reading a chat POST body, without a server: both body shapes, continuations, regenerations and
every way a body is refused, including what no database column could hold."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import CharField

from chat.http.parsing import MAX_ID_LENGTH, ChatInput, Limits, decode_json_body, parse_chat_body, tool_answers
from chat.models import ChatSession, Message, PendingCall, Run
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


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"message": "\xff"}', "not valid UTF-8"),  # a byte no UTF-8 sequence starts with
        (b'{"message": "caf\xc3"}', "not valid UTF-8"),  # a sequence cut short
        (b'{"message": "\xed\xa0\x80"}', "not valid UTF-8"),  # a surrogate, encoded
        (b'{"\xff": 1}', "not valid UTF-8"),  # in a key
        (b'\xff{"message": "hi"}', "not valid JSON"),  # outside any string
    ],
)
def test_a_body_that_is_not_utf8_is_refused(raw: bytes, says: str) -> None:
    with pytest.raises(ValidationError, match=says) as raised:
        decode_json_body(raw)
    assert raised.value.code == "VALIDATION_ERROR" and raised.value.status_code == 400


def assistant(*parts: dict[str, Any], id: str = "a1") -> dict[str, Any]:
    return {"id": id, "role": "assistant", "parts": list(parts)}


def approved(call_id: str = "c1", approval_id: str = "p1", reason: str = "ok") -> dict[str, Any]:
    approval = {"id": approval_id, "approved": True, "reason": reason}
    return {"type": "tool-x", "toolCallId": call_id, "state": "approval-responded", "approval": approval}


def output(value: Any, call_id: str = "c1") -> dict[str, Any]:
    return {"type": "tool-x", "toolCallId": call_id, "state": "output-available", "output": value}


def failed(error: str, call_id: str = "c1") -> dict[str, Any]:
    return {"type": "tool-x", "toolCallId": call_id, "state": "output-error", "errorText": error}


LONG = "x" * (MAX_ID_LENGTH + 1)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        # PostgreSQL's text and jsonb columns hold no NUL: every string that is stored is checked.
        ({"message": "a\x00b"}, "message holds a NUL"),
        ({"messages": [user("a\x00b")]}, "the last user message holds a NUL"),
        ({"messages": [user("hi", "u\x00")]}, "the last user message's id holds a NUL"),
        ({"message": "hi", "state": {"k": ["\x00"]}}, "state holds a NUL"),
        ({"message": "hi", "state": {"\x00": 1}}, "state holds a NUL"),
        ({"message": "hi", "messages": [{"role": "user", "content": "a\x00"}]}, "messages holds a NUL"),
        ({"message": "hi", "messages": [{"role": "user", "metadata": {"k": "\x00"}}]}, "messages holds a NUL"),
        ({"messages": [assistant(approved(reason="no\x00"))]}, "the reason of tool call 'c1' holds a NUL"),
        ({"messages": [assistant(output({"k": "\x00"}))]}, "the output of tool call 'c1' holds a NUL"),
        ({"messages": [assistant(output({"\x00": 1}))]}, "the output of tool call 'c1' holds a NUL"),
        ({"messages": [assistant(failed("\x00"))]}, "the errorText of tool call 'c1' holds a NUL"),
        ({"messages": [assistant(output(1, "c\x00"))]}, "a tool part's toolCallId holds a NUL"),
        ({"messages": [assistant(approved(approval_id="p\x00"))]}, "the approval id of tool call 'c1' holds a NUL"),
        ({"messages": [assistant(id="a\x00")]}, "the assistant message's id holds a NUL"),
        ({"message": "hi", "agent": "chat\x00"}, "agent must be"),
        # Ids go to columns 100 characters wide.
        ({"messages": [user("hi", LONG)]}, f"the last user message's id is longer than {MAX_ID_LENGTH} characters"),
        ({"messages": [assistant(id=LONG)]}, f"the assistant message's id is longer than {MAX_ID_LENGTH} characters"),
        ({"messages": [assistant(output(1, LONG))]}, f"toolCallId is longer than {MAX_ID_LENGTH} characters"),
        (
            {"messages": [assistant(approved(approval_id=LONG))]},
            f"approval id of tool call 'c1' is longer than {MAX_ID_LENGTH}",
        ),
        (
            {"message": "hi", "messages": [{"role": "user", "id": LONG}]},
            f"messages: an id is longer than {MAX_ID_LENGTH}",
        ),
        (
            {"message": "hi", "messages": [{"role": "tool", "toolCallId": LONG}]},
            f"messages: a toolCallId is longer than {MAX_ID_LENGTH}",
        ),
        ({"message": "hi", "agent": LONG}, f"at most {MAX_ID_LENGTH} characters"),
    ],
)
def test_what_no_column_can_hold_is_refused_naming_it(body: Any, says: str) -> None:
    with pytest.raises(ValidationError, match=says) as raised:
        parse(body)
    assert raised.value.code == "VALIDATION_ERROR" and raised.value.status_code == 400


def test_ids_as_wide_as_their_columns_are_taken() -> None:
    widest = "x" * MAX_ID_LENGTH
    assert parse({"messages": [user("hi", widest)], "agent": widest}).user_message_id == widest
    continued = parse({"messages": [assistant(approved(widest, widest), id=widest)]})
    assert continued.continuation_of == widest and continued.answers[0].approval_id == widest
    seeded = parse({"message": "hi", "messages": [{"role": "tool", "id": widest, "toolCallId": widest}]})
    assert seeded.messages is not None and seeded.messages[0].tool_call_id == widest


def test_the_id_limit_is_the_width_of_the_columns_that_keep_ids() -> None:
    columns = [
        (Message, "message_id"),
        (Message, "tool_call_id"),
        (Run, "message_id"),
        (Run, "agent"),
        (ChatSession, "agent"),
        (PendingCall, "tool_call_id"),
    ]
    fields = [model._meta.get_field(name) for model, name in columns]
    assert {field.max_length for field in fields if isinstance(field, CharField)} == {MAX_ID_LENGTH}
    assert all(isinstance(field, CharField) for field in fields)
