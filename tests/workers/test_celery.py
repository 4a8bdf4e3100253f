"""The demo agents on a real Celery worker process, against the test Redis and database."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from chat.models import Checkpoint, Run
from chat.state.store import DjangoStateStore
from helix_site.celery import app as celery_app
from streams.backends import RedisStreamManager
from streams.protocol import RunInterrupted
from tests.chat.ai_sdk.client import ChatClient
from tests.workers.runs import assert_live_equals_stored, live_body, stored_reply
from workers.executors import CeleryExecutor

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("agent", "question"), [("tools", "What is 6 times 7?"), ("research", "How do streams resume?")]
)
async def test_runs_on_a_real_worker(
    celery_worker: dict[str, str], redis_url: str, chat_client: ChatClient, agent: str, question: str
) -> None:
    streams = RedisStreamManager(redis_url)
    store = DjangoStateStore()
    try:
        handle = await CeleryExecutor(store, streams, queue=celery_worker["queue"]).execute(agent, question)
        outcome = await handle.result(timeout=60)
        assert outcome.status == "completed", Path(celery_worker["log"]).read_text()[-3000:]
        run = await Run.objects.aget(pk=handle.run_id)
        assert run.status == "completed" and run.started_at and run.finished_at and run.worker
        assert (run.attempt, run.epoch, run.lease_expires_at) == (1, 1, None)
        assert await Checkpoint.objects.filter(run=run).acount() == run.step_count >= 2
        info = await streams.get_stream_info(handle.session_id)
        assert info is not None and info.status == "ended"
        body = await live_body(streams, handle.session_id, handle.start_sequence, handle.message_id)
        assert_live_equals_stored(chat_client, body, await stored_reply(store, streams, handle.session_id), question)
    finally:
        await streams.aclose()


async def test_a_run_already_taken_is_not_executed_twice(celery_worker: dict[str, str], redis_url: str) -> None:
    streams = RedisStreamManager(redis_url)
    try:
        handle = await CeleryExecutor(DjangoStateStore(), streams, queue=celery_worker["queue"]).execute("chat", "Hi")
        await handle.result(timeout=60)
        steps = (await Run.objects.aget(pk=handle.run_id)).step_count
        result = celery_app.send_task("helix.run_agent", args=[handle.run_id], queue=celery_worker["queue"])
        done = f"Task helix.run_agent[{result.id}] succeeded"
        deadline = time.monotonic() + 20
        while done not in Path(celery_worker["log"]).read_text():
            assert time.monotonic() < deadline, "the redelivered task never finished"
            time.sleep(0.1)
        log = Path(celery_worker["log"]).read_text()
        assert f"{done}" in log and "'skipped'" in log.split(done, 1)[1].splitlines()[0]
        assert (await Run.objects.aget(pk=handle.run_id)).step_count == steps
    finally:
        await streams.aclose()


async def test_a_stop_request_interrupts_a_run_on_the_worker(celery_worker: dict[str, str], redis_url: str) -> None:
    streams = RedisStreamManager(redis_url)
    store = DjangoStateStore()
    try:
        handle = await CeleryExecutor(store, streams, queue=celery_worker["queue"]).execute(
            "research", "A long question"
        )
        deadline = time.monotonic() + 20
        while (await Run.objects.aget(pk=handle.run_id)).status != "running":
            assert time.monotonic() < deadline, "the run never started"
            await asyncio.sleep(0.02)
        assert await store.request_stop(handle.session_id)
        outcome = await handle.result(timeout=30)
        assert outcome.status == "interrupted"
        info = await streams.get_stream_info(handle.session_id)
        deadline = time.monotonic() + 10
        while info is not None and info.status == "active" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            info = await streams.get_stream_info(handle.session_id)
        chunks = [chunk for chunk, _ in await streams.get_all_chunks(handle.session_id)]
        assert isinstance(chunks[-1], RunInterrupted)
        assert info is not None and info.status == "ended"
    finally:
        await streams.aclose()
