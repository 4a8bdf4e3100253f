"""A run that cannot be handed to a worker: a typed 503, the run failed, nothing left waiting."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from chat.models import Run
from chat.state.store import DjangoStateStore
from streams.backends import InMemoryStreamManager
from streams.protocol import ErrorChunk
from tests.chat.http.requests import login, post, ui_body
from workers.exceptions import ExecutorUnavailableError
from workers.executors import CeleryExecutor

pytestmark = pytest.mark.django_db(transaction=True)


def broker_down(*args: Any, **kwargs: Any) -> None:
    raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


async def test_an_unsendable_run_is_failed_and_the_session_stays_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    from celery import current_app

    monkeypatch.setattr(current_app, "send_task", broker_down)
    streams = InMemoryStreamManager()
    executor = CeleryExecutor(DjangoStateStore(), streams, queue="nowhere")
    session_id = str(uuid.uuid4())
    with pytest.raises(ExecutorUnavailableError) as raised:
        await executor.execute("chat", "Hi", session_id=session_id)
    assert (raised.value.status_code, raised.value.retry_after) == (503, 2)
    run = await Run.objects.aget(session_id=session_id)
    assert (run.status, run.error_code) == ("failed", "enqueue_failed")
    info = await streams.get_stream_info(session_id)
    assert info is not None and info.status == "failed"  # a reader is told at once
    assert not [c for c, _ in await streams.get_all_chunks(session_id) if isinstance(c, ErrorChunk)]
    with pytest.raises(ExecutorUnavailableError):  # not RUN_CONFLICT: nothing is left in flight
        await executor.execute("chat", "Again", session_id=session_id)


async def test_over_http_it_is_a_503_with_retry_after(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from celery import current_app

    from workers.presence import WorkerPresence

    monkeypatch.setattr(current_app, "send_task", broker_down)
    # A worker listens (workers.presence), but the broker fails as the task is sent: the run is
    # recorded, then failed. (With no worker listening nothing is recorded: test_presence.py.)
    monkeypatch.setattr(WorkerPresence, "listening", lambda self, queue: 1)
    settings.HELIX = {**settings.HELIX, "EXECUTOR": "celery"}
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    response = await post(alice, session_id, ui_body("Hi", session_id))
    assert (response.status_code, response.json()["code"], response["Retry-After"]) == (
        503,
        "EXECUTOR_UNAVAILABLE",
        "2",
    )
    assert [r.status async for r in Run.objects.filter(session_id=session_id)] == ["failed"]
