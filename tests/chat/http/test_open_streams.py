"""The cap on the streams one caller holds open in a web process: one more is a typed 429, a POST
is refused before anything is stored, and a stream that ends frees its place."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chat.models import ChatSession, Run
from tests.chat.http.requests import login, post, ui_body

pytestmark = pytest.mark.django_db(transaction=True)


class Open:
    """A streaming response whose first part was read, still open."""

    def __init__(self, response: Any) -> None:
        self.response = response

    async def aclose(self) -> None:
        """What Django's handler does once the response is over (sent, or its client gone)."""
        await sync_to_async(self.response.close)()


async def first_part(response: Any) -> Open:
    await anext(aiter(response.streaming_content))
    return Open(response)


async def test_a_caller_at_the_cap_gets_429_and_other_callers_do_not(settings: Any) -> None:
    settings.HELIX = {**settings.HELIX, "MAX_STREAMS_PER_CALLER": 2, "SCRIPTED_DELAY_MS": "40"}
    alice, bob = await login("alice"), await login("bob")
    session_id = str(uuid.uuid4())
    live = await first_part(await post(alice, session_id, ui_body("Tell me a long story", session_id)))
    resumed = await first_part(await alice.get(f"/api/chat/{session_id}/stream"))

    refused = await alice.get(f"/api/chat/{session_id}/stream")
    assert (refused.status_code, refused["Retry-After"], refused.json()["code"]) == (429, "5", "TOO_MANY_STREAMS")
    other = str(uuid.uuid4())
    refused = await post(alice, other, ui_body("Hello", other))
    assert (refused.status_code, refused.json()["code"]) == (429, "TOO_MANY_STREAMS")
    assert not await sync_to_async(ChatSession.objects.filter(pk=other).exists)()  # nothing stored
    assert await sync_to_async(Run.objects.count)() == 1

    bob_session = str(uuid.uuid4())
    assert (await post(bob, bob_session, ui_body("Hello", bob_session))).status_code == 200

    await resumed.aclose()  # a tab closed: its place is free again
    again = await first_part(await alice.get(f"/api/chat/{session_id}/stream"))
    await again.aclose()
    await live.aclose()


async def test_concurrent_requests_of_one_caller_cannot_all_pass_the_cap(settings: Any) -> None:
    """The check and the count are one step: six resumes at once against a cap of two."""
    settings.HELIX = {**settings.HELIX, "MAX_STREAMS_PER_CALLER": 2, "SCRIPTED_DELAY_MS": "40"}
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    live = await post(alice, session_id, ui_body("Tell me a long story", session_id))
    await anext(aiter(live.streaming_content))
    answers = await asyncio.gather(*(alice.get(f"/api/chat/{session_id}/stream") for _ in range(6)))
    assert sorted(r.status_code for r in answers) == [200] + [429] * 5  # the POST holds the other place
    for response in [live, *answers]:
        await sync_to_async(response.close)()
