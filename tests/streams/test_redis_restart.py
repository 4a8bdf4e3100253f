"""Redis restarted mid-stream (AOF on, fsync always): nothing acknowledged is lost or doubled."""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from streams.backends import RedisStreamManager
from tests.streams.helpers import text


class RestartableRedis:
    """A redis-server of our own with an append-only file, to kill and start again."""

    def __init__(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.dir = Path(tempfile.mkdtemp(prefix="helix-aof-"))
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--bind", "127.0.0.1",
                "--port", str(self.port),
                "--dir", str(self.dir),
                "--save", "",
                "--appendonly", "yes",
                "--appendfsync", "always",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url, socket_connect_timeout=0.2).ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def crash(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def restartable_redis() -> Iterator[RestartableRedis]:
    server = RestartableRedis()
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("buffered", [False, True])
async def test_writers_and_readers_ride_out_a_redis_crash(restartable_redis: RestartableRedis, buffered: bool) -> None:
    manager = RedisStreamManager(restartable_redis.url, retry_timeout=15, socket_timeout=2)
    try:
        writer = await manager.create_writer("s", "a", buffered=buffered)
        readers = [await manager.create_resumable_reader("s") for _ in range(3)]
        tails = [asyncio.ensure_future(_sequences(r)) for r in readers]
        total = 300
        for index in range(total):
            await writer.write(text(f"w{index}"))  # never raises: a Redis restart is a pause
            if index == total // 2:
                await writer.flush()
                await asyncio.to_thread(restartable_redis.crash)
                restarting = asyncio.ensure_future(asyncio.to_thread(_restart_later, restartable_redis))
            await asyncio.sleep(0.002)
        await writer.close()
        await restarting
        await manager.end_stream("s")
        stored = await manager.get_all_chunks("s")
        assert [c.delta for c, _ in stored] == [f"w{i}" for i in range(total)]  # type: ignore[union-attr]
        for sequences in await asyncio.wait_for(asyncio.gather(*tails), 30):
            assert sequences == list(range(1, total + 1))
    finally:
        await manager.aclose()


async def test_a_writer_opened_while_redis_restarts_waits_for_it(restartable_redis: RestartableRedis) -> None:
    """Opening a writer (a run starting, or one recording its failure) rides out a restart like
    a write does, instead of failing the run on the spot."""
    manager = RedisStreamManager(restartable_redis.url, retry_timeout=15, socket_timeout=2)
    try:
        await manager.create_writer("opened-early", "a")  # the pool is connected before the crash
        await asyncio.to_thread(restartable_redis.crash)
        restarting = asyncio.ensure_future(asyncio.to_thread(_restart_later, restartable_redis))
        writer = await manager.create_writer("s", "a")
        await writer.write(text("after the restart"))
        await writer.close()
        await restarting
        assert [c.delta for c, _ in await manager.get_all_chunks("s")] == ["after the restart"]  # type: ignore[union-attr]
    finally:
        await manager.aclose()


def _restart_later(server: RestartableRedis) -> None:
    time.sleep(1.0)
    server.start()


async def _sequences(reader) -> list[int]:  # type: ignore[no-untyped-def]
    return [sequence async for _, sequence in reader]


@pytest.mark.django_db(transaction=True)
async def test_a_run_rides_out_a_redis_crash_and_the_client_sees_what_was_stored(
    restartable_redis: RestartableRedis, chat_client: Any, settings: Any
) -> None:
    from chat.state.store import DjangoStateStore
    from tests.workers.runs import assert_live_equals_stored, live_body, stored_reply
    from workers.executors import InProcessExecutor

    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "8"}
    streams = RedisStreamManager(restartable_redis.url, retry_timeout=15, socket_timeout=2)
    try:
        store = DjangoStateStore()
        question = "How do streams resume?"
        handle = await InProcessExecutor(store, streams).execute("research", question)
        await asyncio.sleep(1.0)  # mid-run: the sub-agent or the answer is streaming
        await asyncio.to_thread(restartable_redis.crash)
        await asyncio.to_thread(_restart_later, restartable_redis)
        outcome = await handle.result(timeout=60)
        assert outcome.status == "completed", outcome
        chunks = await streams.get_all_chunks(handle.session_id)
        assert [s for _, s in chunks] == list(range(1, len(chunks) + 1))
        body = await live_body(streams, handle.session_id, handle.start_sequence, handle.message_id)
        assert_live_equals_stored(chat_client, body, await stored_reply(store, streams, handle.session_id), question)
    finally:
        await streams.aclose()
