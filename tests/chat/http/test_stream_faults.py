"""Every stream ends: whatever fails on a stream path, the client gets a typed error event and
the response finishes; nothing escapes into the server."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.db import OperationalError

from chat.ai_sdk.sse import ending_cleanly
from streams.exceptions import StreamUnavailableError
from tests.chat.http.requests import login, post, ui_body

pytestmark = pytest.mark.django_db(transaction=True)


async def body_failing_with(error: Exception) -> AsyncIterator[bytes]:
    yield b'data: {"type":"start"}\n\n'
    raise error


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (StreamUnavailableError("s1", "Redis is unreachable"), "STREAM_UNAVAILABLE: Redis is unreachable"),
        (KeyError("a bug"), "EXECUTION_ERROR: the stream broke off"),
    ],
)
async def test_a_failing_body_ends_with_an_error_event(error: Exception, says: str) -> None:
    parts = [part async for part in ending_cleanly(body_failing_with(error), logging.getLogger("test"))]
    assert parts[0] == b'data: {"type":"start"}\n\n'
    assert parts[-1].startswith(b'data: {"type":"error","errorText":"' + says.encode())
    assert parts[-1].endswith(b"data: [DONE]\n\n")


async def test_a_session_deleted_while_it_streams_ends_its_stream_with_an_error(settings: Any) -> None:
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "30"}
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    response = await post(alice, session_id, ui_body("Tell me a long story", session_id))
    parts = aiter(response.streaming_content)
    seen = b""
    while b"text-delta" not in seen:  # the answer is streaming
        seen += await anext(parts)
    assert (await alice.delete(f"/api/chat/{session_id}")).status_code == 204
    rest = b"".join([part async for part in parts])
    assert b'"type":"error"' in rest and b"STREAM_NOT_FOUND" in rest
    assert rest.endswith(b"data: [DONE]\n\n")


async def test_a_database_that_does_not_answer_is_a_typed_503_without_the_drivers_text(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())

    def stalled(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError('canceling statement due to lock timeout on relation "chat_run" (host db-7)')

    monkeypatch.setattr("chat.state.db._retrying", stalled)
    for response in (
        await post(alice, session_id, ui_body("Hi", session_id)),
        await alice.get(f"/api/chat/{session_id}/stream"),
        await alice.get(f"/api/chat/{session_id}/messages"),
    ):
        assert (response.status_code, response["Retry-After"]) == (503, "5")
        assert response.json()["code"] == "DATABASE_UNAVAILABLE"
        assert "chat_run" not in response.content.decode()
    assert "lock timeout" in caplog.text  # the details go to the logs
