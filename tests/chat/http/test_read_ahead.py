"""A resume that names its position reads the stream's first page while the caller is checked:
the page is used only by the owner, and only when the current run starts at or before it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import AsyncClient

from chat.services import get_handler
from tests.chat.http.requests import login, post, ui_body
from tests.chat.http.test_resume_positions import sse, text

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_model(settings: Any) -> None:
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "0"}


@pytest.fixture
def page_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The positions of every first page the store is asked for."""
    streams = get_handler().streams
    first_page = streams.first_page
    asked: list[int] = []

    async def counted(stream_id: str, from_sequence: int) -> Any:
        asked.append(from_sequence)
        return await first_page(stream_id, from_sequence)

    monkeypatch.setattr(streams, "first_page", counted)
    yield asked


async def test_the_owner_resuming_from_a_position_reads_the_first_page_once(page_reads: list[int]) -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    live = await sse(await post(alice, session_id, ui_body("Tell me a story", session_id)))
    sequences = [sequence for sequence, _ in live if sequence is not None]
    middle = sequences[len(sequences) // 2]
    page_reads.clear()
    resumed = await alice.get(f"/api/chat/{session_id}", headers={"Last-Event-ID": str(middle)})
    assert resumed.status_code == 200
    events = await sse(resumed)
    assert text(events) == text(live) and events[-1][1] == {"type": "finish"}
    assert page_reads == [middle]  # read ahead, and that page taken: no second read


async def test_a_position_before_the_current_run_reads_the_run_from_its_start(page_reads: list[int]) -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    first = await sse(await post(alice, session_id, ui_body("Tell me a story", session_id)))
    sequences = [sequence for sequence, _ in first if sequence is not None]
    old, start = sequences[3], sequences[-1]  # a position in the first run; the second starts after it
    second = await sse(await post(alice, session_id, ui_body("And another one", session_id)))
    page_reads.clear()
    resumed = await alice.get(f"/api/chat/{session_id}", headers={"Last-Event-ID": str(old)})
    assert resumed.status_code == 200
    events = await sse(resumed)
    # the page read ahead from the old position is dropped: none of the first run's chunks leak in
    assert page_reads == [old, start]
    assert events[0][1] == next(event for _, event in second if event["type"] == "start")
    assert text(events) == text(second)


async def test_someone_elses_session_gets_nothing_of_the_page_read_ahead(page_reads: list[int]) -> None:
    alice, mallory = await login("alice"), await login("mallory")
    session_id = str(uuid.uuid4())
    live = await sse(await post(alice, session_id, ui_body("A secret story", session_id)))
    middle = [sequence for sequence, _ in live if sequence is not None][2]
    page_reads.clear()
    response = await mallory.get(f"/api/chat/{session_id}", headers={"Last-Event-ID": str(middle)})
    assert (response.status_code, response.content) == (204, b"")  # as for a session that does not exist
    assert page_reads == [middle]  # it was read, and dropped


async def test_a_request_without_credentials_reads_nothing_ahead(page_reads: list[int]) -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    await sse(await post(alice, session_id, ui_body("Hello", session_id)))
    page_reads.clear()
    response = await AsyncClient().get(f"/api/chat/{session_id}", headers={"Last-Event-ID": "2"})
    assert response.status_code in (401, 403)
    assert page_reads == []
