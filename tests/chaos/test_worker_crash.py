"""SIGKILL the Celery worker running a run, with another worker and the reaper alive."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from chat.state.store import DjangoStateStore
from streams.backends import RedisStreamManager
from tests.chaos.crash import inspect, reference_conversation, run_once
from tests.chaos.harness import WorkerPool
from tests.live import use_broker
from workers.executors import CeleryExecutor

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def pool(test_database: str, redis_url: str) -> Iterator[WorkerPool]:
    previous = use_broker(redis_url)
    workers = WorkerPool(test_database, redis_url)
    workers.start()
    yield workers
    workers.stop()
    use_broker(previous)


@pytest.mark.parametrize("kill_after", [0.4, 1.2, 2.0])
async def test_a_killed_worker_is_taken_over_and_nothing_is_lost_or_doubled(
    pool: WorkerPool, redis_url: str, kill_after: float
) -> None:
    streams = RedisStreamManager(redis_url)
    executor = CeleryExecutor(DjangoStateStore(), streams, queue=pool.queue)
    try:
        reference = await reference_conversation(executor)
        started = time.monotonic()
        run_id, killed_at = await run_once(pool, executor, kill_after)
        result = await inspect(run_id, killed_at, reference, streams)
    finally:
        await streams.aclose()
    assert result.killed, f"the run ended before the kill at {kill_after} s"
    assert result.completed, pool.log_tail()
    assert result.resynced and result.superseded and result.attempts == 2
    assert result.same_messages and (result.duplicates, result.lost) == (0, 0)
    assert result.notes == 1, "a tool of a committed step ran again"
    assert result.takeover_seconds is not None and result.takeover_seconds < 10
    assert time.monotonic() - started < 60


async def test_a_frozen_worker_woken_after_a_takeover_cannot_write_a_single_chunk(
    pool: WorkerPool, redis_url: str
) -> None:
    import asyncio
    import os
    import signal

    from chat.models import Run

    streams = RedisStreamManager(redis_url)
    executor = CeleryExecutor(DjangoStateStore(), streams, queue=pool.queue)
    try:
        reference = await reference_conversation(executor)
        handle = await executor.execute("research", "How do resumable streams survive a crash?")
        await asyncio.sleep(0.8)
        run = await Run.objects.aget(pk=handle.run_id)
        zombie = int(run.worker.split(":")[1])
        os.kill(zombie, signal.SIGSTOP)  # frozen mid-run: its lease runs out, another worker takes over
        try:
            await handle.result(timeout=60)
            info = await streams.get_stream_info(handle.session_id)
            assert info is not None and info.status == "ended"
        finally:
            os.kill(zombie, signal.SIGCONT)
        await asyncio.sleep(3)  # the zombie wakes up in the middle of its step and tries to go on
        after = await streams.get_stream_info(handle.session_id)
        assert after is not None and (after.status, after.latest_sequence) == ("ended", info.latest_sequence)
        result = await inspect(handle.run_id, None, reference, streams)
        assert result.completed and result.same_messages and (result.duplicates, result.lost, result.notes) == (0, 0, 1)
        assert result.attempts == 2
        log = "\n".join(p.read_text() for p in pool.logs.glob("worker-*.log"))
        assert "was superseded" in log or "taken over by another worker" in log
    finally:
        await streams.aclose()


def _shown(messages: list[dict[str, object]]) -> list[object]:
    """What a page shows of an answer: the content of its parts, without ids or transient data."""
    from tests.chat.ai_sdk.scenario import content_view, last_reply

    view = content_view(last_reply(messages))
    return [
        {k: v for k, v in part.items() if k not in ("id", "toolCallId", "state")}
        for part in view["parts"]
        if not str(part["type"]).startswith("data-")
    ]


async def test_the_real_client_following_a_crash_ends_with_the_uncrashed_answer(
    pool: WorkerPool, redis_url: str
) -> None:
    import asyncio
    import uuid

    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    from chat.models import Run
    from tests.chaos.crash import QUESTION
    from tests.chat.ai_sdk.client import LIVE_HARNESS, ChatClient
    from tests.live import serve_site

    user = await User.objects.acreate(username=f"chaos-{uuid.uuid4().hex[:6]}")
    token = (await Token.objects.acreate(user=user)).key
    client = ChatClient(LIVE_HARNESS)
    env = {**pool.env, "HELIX_EXECUTOR": "celery"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    try:
        with serve_site(env) as port:

            def chat(session_id: str) -> dict[str, object]:
                actions = [{"kind": "send", "text": QUESTION}, {"kind": "wait-for-end"}]
                base = f"http://127.0.0.1:{port}"
                return client.run("v6", actions, baseUrl=base, sessionId=session_id, token=token, agent="research")

            reference = await asyncio.to_thread(chat, str(uuid.uuid4()))
            session_id = str(uuid.uuid4())
            following = asyncio.ensure_future(asyncio.to_thread(chat, session_id))
            run = None
            for _ in range(100):
                run = await Run.objects.filter(session_id=session_id, status="running").exclude(worker="").afirst()
                if run is not None:
                    break
                await asyncio.sleep(0.05)
            assert run is not None, "the run never started"
            await asyncio.sleep(1.0)
            pool.kill(int(run.worker.split(":")[1]))
            answer = await asyncio.wait_for(following, 120)
    finally:
        client.close()
    assert (await Run.objects.aget(pk=run.pk)).attempt == 2
    resyncs = [d for d in cast(list[dict[str, Any]], answer["data"]) if d.get("type") == "data-stream-resync"]
    assert resyncs, "the client never heard of the takeover"
    assert _shown(answer["messages"]) == _shown(reference["messages"])  # type: ignore[arg-type]


async def test_a_clean_shutdown_hands_the_run_back_without_counting_an_attempt(
    pool: WorkerPool, redis_url: str
) -> None:
    import asyncio
    import signal

    from chat.models import Run
    from tests.chaos.crash import QUESTION

    streams = RedisStreamManager(redis_url)
    executor = CeleryExecutor(DjangoStateStore(), streams, queue=pool.queue)
    try:
        reference = await reference_conversation(executor)
        handle = await executor.execute("research", QUESTION)
        await asyncio.sleep(1.0)
        run = await Run.objects.aget(pk=handle.run_id)
        assert run.status == "running", "the run ended before the shutdown"
        started = time.monotonic()
        await asyncio.to_thread(pool.kill, int(run.worker.split(":")[1]), signal.SIGTERM)
        await handle.result(timeout=60)
        result = await inspect(handle.run_id, None, reference, streams)
    finally:
        await streams.aclose()
    assert result.completed and result.resynced, pool.log_tail()
    assert result.attempts == 1, "a clean shutdown counted as a lost worker"
    assert result.same_messages and (result.duplicates, result.lost, result.notes) == (0, 0, 1)
    assert time.monotonic() - started < 30  # handed back at once, not after a lease ran out
