"""Resume positions mean what they say: a client gets what it lacks, the end when the run ended,
204 only when it has everything, and a typed error for a position the server never sent."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.chat.http.requests import login, post, ui_body

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_model(settings: Any) -> None:
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "0"}


async def sse(response: Any) -> list[tuple[int | None, dict[str, Any]]]:
    """``(id, event)`` pairs of an SSE body."""
    raw = b"".join([part async for part in response.streaming_content]).decode()
    events = []
    for block in raw.split("\n\n"):
        lines = block.splitlines()
        ids = [int(line[4:]) for line in lines if line.startswith("id: ")]
        for line in lines:
            if line.startswith("data: {"):
                events.append((ids[0] if ids else None, json.loads(line[6:])))
    return events


def text(events: list[tuple[int | None, dict[str, Any]]]) -> str:
    return "".join(e.get("delta", "") for _, e in events if e["type"] == "text-delta")


async def test_a_client_that_missed_the_end_of_a_run_gets_the_rest_and_the_end() -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    live = await sse(await post(alice, session_id, ui_body("Tell me a story", session_id)))
    sequences = [sequence for sequence, _ in live if sequence is not None]
    middle, last = sequences[len(sequences) // 2], sequences[-1]
    # the client dropped at `middle`; the run finished meanwhile
    resumed = await alice.get(f"/api/chat/{session_id}", headers={"Last-Event-ID": str(middle)})
    assert resumed.status_code == 200
    events = await sse(resumed)
    assert events[0][1]["type"] == "start" and events[-1][1] == {"type": "finish"}
    assert text(events) == text(live)  # the content so far replayed, then the rest
    done = await alice.get(f"/api/chat/{session_id}", headers={"Last-Event-ID": str(last)})
    assert done.status_code == 204  # it has everything
    assert (await alice.get(f"/api/chat/{session_id}")).status_code == 204  # no position after the end


async def test_a_position_past_the_end_is_a_typed_error() -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    live = await sse(await post(alice, session_id, ui_body("Hello", session_id)))
    last = max(sequence for sequence, _ in live if sequence is not None)
    for header in ("Last-Event-ID", "X-Resume-From-Sequence"):
        response = await alice.get(f"/api/chat/{session_id}/stream", headers={header: str(last + 50)})
        error = response.json()
        assert (response.status_code, error["code"]) == (400, "VALIDATION_ERROR")
        assert "past the end" in error["error"]
