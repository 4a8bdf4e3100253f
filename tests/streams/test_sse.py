"""SSE framing, headers, keep-alive and resume positions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from django.test import RequestFactory
from rest_framework.request import Request

from streams.backends import StreamManager
from streams.exceptions import ResumePositionError
from streams.sse import (
    DONE,
    KEEP_ALIVE,
    UI_MESSAGE_STREAM_HEADERS,
    encode_event,
    extract_resume_position,
    header_value,
    wire_events,
    with_keep_alive,
)
from tests.streams.helpers import text, texts


def test_encode_event() -> None:
    assert encode_event({"type": "text-delta", "id": "t1", "delta": "é"}) == (
        'data: {"type":"text-delta","id":"t1","delta":"é"}\n\n'.encode()
    )
    assert encode_event({"type": "start"}, id=7) == b'id: 7\ndata: {"type":"start"}\n\n'
    assert encode_event(b'{"a":1}', id="3", event="x") == b'id: 3\nevent: x\ndata: {"a":1}\n\n'
    assert encode_event("[DONE]") == DONE


@pytest.mark.parametrize("bad", [{"x": float("nan")}, {"x": float("inf")}])
def test_encode_event_refuses_nan(bad: object) -> None:
    with pytest.raises(ValueError):
        encode_event(bad)


def test_encode_event_refuses_multiline_payloads() -> None:
    with pytest.raises(ValueError):
        encode_event("a\nb")


def test_ui_message_stream_headers() -> None:
    assert UI_MESSAGE_STREAM_HEADERS == {
        "content-type": "text/event-stream",
        "cache-control": "no-cache",
        "connection": "keep-alive",
        "x-vercel-ai-ui-message-stream": "v1",
        "x-accel-buffering": "no",
    }


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (None, None),
        ({}, None),
        ({"Last-Event-ID": "42"}, 42),
        ({"last-event-id": " 7 "}, 7),
        ({"X-Resume-From-Sequence": "0"}, 0),
        ({"x-resume-at": "12"}, 12),
        ({"HTTP_LAST_EVENT_ID": "5"}, 5),
        ({"X-Resume-At": "1", "X-Resume-From-Sequence": "2", "Last-Event-ID": "3"}, 3),
        ({"X-Resume-At": "1", "X-Resume-From-Sequence": "2"}, 2),
        ({"Last-Event-ID": ""}, None),
        ("42", 42),
        (b"9", 9),
        (15, 15),
        ("", None),
        (str(2**53 - 1), 2**53 - 1),
    ],
)
def test_extract_resume_position(source: object, expected: int | None) -> None:
    assert extract_resume_position(source) == expected


def test_extract_resume_position_from_a_django_request() -> None:
    request = RequestFactory().get("/", HTTP_LAST_EVENT_ID="17")
    assert extract_resume_position(request) == 17
    request = RequestFactory().get("/", HTTP_X_RESUME_FROM_SEQUENCE="4")
    assert extract_resume_position(request) == 4
    assert extract_resume_position(RequestFactory().get("/")) is None
    # Precedence as for a header mapping; a blank header is no position; DRF's request too.
    request = RequestFactory().get("/", HTTP_X_RESUME_AT="1", HTTP_X_RESUME_FROM_SEQUENCE="2", HTTP_LAST_EVENT_ID=" ")
    assert extract_resume_position(request) == 2
    assert extract_resume_position(Request(request)) == 2
    with pytest.raises(ResumePositionError) as info:
        extract_resume_position(RequestFactory().get("/", HTTP_X_RESUME_AT="-4"))
    assert info.value.header == "X-Resume-At"


def test_header_value_of_a_request_reads_its_meta() -> None:
    request = RequestFactory().get("/", HTTP_X_EXISTING_MESSAGE_ID="msg-1", CONTENT_TYPE="text/plain")
    assert header_value(request, "x-existing-message-id") == "msg-1"
    assert header_value(Request(request), "X-Existing-Message-Id") == "msg-1"
    assert header_value(request, "Content-Type") == "text/plain"
    assert header_value(request, "X-Absent") is None
    assert header_value({"X-Existing-Message-Id": "msg-2"}, "x-existing-message-id") == "msg-2"


@pytest.mark.parametrize(
    ("source", "header", "words"),
    [
        ({"Last-Event-ID": "-1"}, "Last-Event-ID", "negative"),
        ({"X-Resume-From-Sequence": "abc"}, "X-Resume-From-Sequence", "non-negative integer"),
        ({"X-Resume-At": "1.5"}, "X-Resume-At", "non-negative integer"),
        ({"Last-Event-ID": str(2**53)}, "Last-Event-ID", "too large"),
        ({"Last-Event-ID": "9" * 40}, "Last-Event-ID", "non-negative integer"),
        ({"Last-Event-ID": "١٢"}, "Last-Event-ID", "non-negative integer"),
        ("-3", None, "negative"),
        (-3, None, "negative"),
        (3.5, None, "Unsupported"),
    ],
)
def test_bad_resume_positions(source: object, header: str | None, words: str) -> None:
    with pytest.raises(ResumePositionError) as info:
        extract_resume_position(source)
    assert info.value.header == header
    assert words in str(info.value)
    assert info.value.status_code == 400 and info.value.code == "VALIDATION_ERROR"


async def test_keep_alive_while_idle_and_source_closed_with_it() -> None:
    closed = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        try:
            yield b"a"
            await asyncio.sleep(0.25)
            yield b"b"
            await asyncio.sleep(10)
            yield b"never"
        finally:
            closed.set()

    stream = with_keep_alive(slow(), 0.1)
    received = [await anext(stream) for _ in range(4)]
    assert received == [b"a", KEEP_ALIVE, KEEP_ALIVE, b"b"]
    await stream.aclose()  # type: ignore[attr-defined]  # what a client disconnect does (an async generator)
    assert closed.is_set()


async def test_keep_alive_passes_a_finished_source_through() -> None:
    async def quick() -> AsyncIterator[bytes]:
        yield b"x"

    assert [item async for item in with_keep_alive(quick(), 5)] == [b"x"]


async def test_wire_events_of_a_stream(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a")
    await writer.write_many(texts(3))
    await manager.end_stream("s")
    reader = await manager.create_resumable_reader("s", 1)
    assert reader is not None
    body = b"".join([event async for event in wire_events(reader)])
    events = body.split(b"\n\n")
    assert events[-1] == b""
    assert events[0].startswith(b"id: 2\ndata: ")
    payloads = [json.loads(e.split(b"data: ", 1)[1]) for e in events[:-1]]
    assert [p["type"] for p in payloads] == ["chunk", "chunk", "end"]
    assert [p.get("sequence") for p in payloads] == [2, 3, None]
    assert payloads[0]["chunk"]["delta"] == "t1"


async def test_wire_events_of_a_failing_stream(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a")
    await writer.write(text("x"))
    reader = await manager.create_resumable_reader("s")
    assert reader is not None
    events = wire_events(reader)
    assert b'"sequence":1' in await anext(events)
    await manager.fail_stream("s", "boom")
    assert json.loads((await anext(events)).split(b"data: ")[1]) == {"type": "fail", "error": "boom"}
