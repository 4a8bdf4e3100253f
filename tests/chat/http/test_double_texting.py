"""Double texting: a POST while the session's run is in flight, under each policy.

The runs are real (in-process executor, Django store, scripted model slowed down so that the first
run is still streaming when the second message comes); responses are read as a browser would.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from django.test import AsyncClient

from chat.models import Run
from tests.chat.http.requests import login, post, read_events, ui_body

pytestmark = pytest.mark.django_db(transaction=True)


def policy(settings: Any, name: str) -> None:
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "15", "DOUBLE_TEXTING": name}


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e.get("delta", "") for e in events if e["type"] == "text-delta")


async def statuses(session_id: str) -> list[str]:
    return [r.status async for r in Run.objects.filter(session_id=session_id).order_by("created_at")]


async def first_message(client: AsyncClient) -> tuple[str, Any]:
    session_id = str(uuid.uuid4())
    response = await post(client, session_id, ui_body("Tell me a long story", session_id))
    assert response.status_code == 200
    return session_id, response


async def test_reject_answers_409_and_starts_nothing(settings: Any) -> None:
    policy(settings, "reject")
    alice = await login("alice")
    session_id, first = await first_message(alice)
    second = await post(alice, session_id, ui_body("Hello?", session_id), headers={"X-Resume-From-Sequence": "0"})
    assert (second.status_code, second.json()["code"]) == (409, "RUN_CONFLICT")
    await read_events(first)
    assert await statuses(session_id) == ["completed"]


async def test_reattach_streams_the_run_in_flight_to_a_post_with_the_helpers_headers(settings: Any) -> None:
    policy(settings, "reattach")
    alice = await login("alice")
    session_id, first = await first_message(alice)
    plain = await post(alice, session_id, ui_body("Hello?", session_id))
    assert (plain.status_code, plain.json()["code"]) == (409, "RUN_CONFLICT")  # no headers: rejected
    other = {"X-Resume-From-Sequence": "0", "X-Existing-Message-Id": "msg-another-reply"}
    assert (await post(alice, session_id, ui_body("Hello?", session_id), headers=other)).status_code == 409
    run = await Run.objects.aget(session_id=session_id)
    headers = {"X-Resume-From-Sequence": "0", "X-Existing-Message-Id": run.message_id}
    second = await post(alice, session_id, ui_body("Hello?", session_id), headers=headers)
    assert second.status_code == 200, (second.content, await statuses(session_id))
    first_events, second_events = await asyncio.gather(read_events(first), read_events(second))
    assert text_of(second_events) == text_of(first_events) != ""
    assert second_events[0] == {"type": "start", "messageId": run.message_id}
    assert await statuses(session_id) == ["completed"]  # nothing new started


async def test_interrupt_stops_the_run_in_flight_then_answers_the_new_message(settings: Any) -> None:
    policy(settings, "interrupt")
    alice = await login("alice")
    session_id, first = await first_message(alice)
    await asyncio.sleep(0.2)  # the first answer is under way
    second = await post(alice, session_id, ui_body("Stop, tell me about Lisbon", session_id))
    assert second.status_code == 200
    first_events, second_events = await asyncio.gather(read_events(first), read_events(second))
    assert first_events[-1]["type"] == "finish" and text_of(first_events) != ""  # kept what it streamed
    assert text_of(second_events) != "" and second_events[0]["messageId"] != first_events[0]["messageId"]
    assert await statuses(session_id) == ["interrupted", "completed"]


async def test_enqueue_starts_each_message_when_the_run_before_it_ends(settings: Any) -> None:
    policy(settings, "enqueue")
    alice = await login("alice")
    session_id, first = await first_message(alice)
    # two tabs send while the first answer streams
    tab_one, tab_two = await asyncio.gather(
        post(alice, session_id, ui_body("And then?", session_id)),
        post(alice, session_id, ui_body("And after that?", session_id)),
    )
    assert (tab_one.status_code, tab_two.status_code) == (200, 200)
    answers = await asyncio.gather(read_events(first), read_events(tab_one), read_events(tab_two))
    assert all(text_of(events) for events in answers)
    assert len({events[0]["messageId"] for events in answers}) == 3
    assert await statuses(session_id) == ["completed"] * 3
