"""One contract for every stream backend: each test runs against memory and Redis."""

from __future__ import annotations

import asyncio
import random

import pytest

from streams.backends import StreamManager
from streams.exceptions import (
    ChunkValidationError,
    SequenceExpiredError,
    StreamClosedError,
    StreamNotFoundError,
    StreamSupersededError,
    ValidationError,
    WriterClosedError,
)
from streams.protocol import TextDelta
from streams.utils import collect_all
from tests.streams.helpers import text, texts


async def drain(reader) -> list[int]:  # type: ignore[no-untyped-def]
    return [sequence async for _, sequence in reader]


async def test_sequences_start_at_one_and_rise_by_one(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "agent-1")
    assert [await writer.write(chunk) for chunk in texts(5)] == [1, 2, 3, 4, 5]
    assert await writer.write_many(texts(3)) == 8
    stored = await manager.get_all_chunks("s")
    assert [s for _, s in stored] == list(range(1, 9))
    assert [c.delta for c, _ in stored] == [f"t{i}" for i in range(5)] + ["t0", "t1", "t2"]  # type: ignore[union-attr]


async def test_create_writer_creates_the_stream(manager: StreamManager) -> None:
    assert await manager.get_stream_info("new") is None
    await manager.create_writer("new", "agent-1")
    info = await manager.get_stream_info("new")
    assert info is not None
    assert (info.status, info.total_chunks, info.latest_sequence, info.error) == ("active", 0, 0, None)
    assert info.created_at and info.updated_at


async def test_writer_fills_agent_and_timestamp_of_dicts(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "run-7", "assistant")
    await writer.write({"type": "text_delta", "delta": "hi"})
    [(chunk, _)] = await manager.get_all_chunks("s")
    assert isinstance(chunk, TextDelta)
    assert (chunk.agent_id, chunk.agent_type, chunk.delta) == ("run-7", "assistant", "hi")
    assert chunk.timestamp > 1_700_000_000_000


async def test_two_writers_never_collide_or_skip(manager: StreamManager) -> None:
    first = await manager.create_writer("s", "a")
    second = await manager.create_writer("s", "b")

    async def produce(writer, name: str) -> list[int]:  # type: ignore[no-untyped-def]
        sequences = []
        for i in range(150):
            sequences.append(await writer.write(text(f"{name}{i}", agent_id=name)))
            if i % 7 == 0:
                await asyncio.sleep(0)
        return sequences

    got_a, got_b = await asyncio.gather(produce(first, "a"), produce(second, "b"))
    assert sorted(got_a + got_b) == list(range(1, 301))
    stored = await manager.get_all_chunks("s")
    for name in ("a", "b"):
        mine = [c.delta for c, _ in stored if c.agent_id == name]  # type: ignore[union-attr]
        assert mine == [f"{name}{i}" for i in range(150)]


async def test_resumable_read_from_n_then_tails_live(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "agent-1")
    await writer.write_many(texts(10))
    reader = await manager.create_resumable_reader("s", from_sequence=4)
    assert reader is not None
    assert (reader.status, reader.current_sequence, reader.total_chunks) == ("active", 4, 10)
    task = asyncio.ensure_future(drain(reader))
    for chunk in texts(5, "live"):
        await writer.write(chunk)
        await asyncio.sleep(0.001)
    await manager.end_stream("s")
    assert await asyncio.wait_for(task, 5) == list(range(5, 16))
    assert (reader.status, reader.current_sequence, reader.total_chunks) == ("ended", 15, 15)


async def test_readers_attaching_at_random_points_see_no_gap_and_no_duplicate(manager: StreamManager) -> None:
    rng = random.Random(7)
    writers = [await manager.create_writer("s", f"w{i}") for i in range(2)]
    total = 600
    results: list[tuple[int, list[int]]] = []
    tasks = []

    async def follow(start: int) -> None:
        reader = await manager.create_resumable_reader("s", start)
        assert reader is not None
        results.append((start, await drain(reader)))

    async def produce(writer, count: int) -> None:  # type: ignore[no-untyped-def]
        for _ in range(count):
            await writer.write(text("x"))
            if rng.random() < 0.3:
                await asyncio.sleep(0)

    async def attach() -> None:
        for _ in range(25):
            await asyncio.sleep(rng.random() * 0.01)
            info = await manager.get_stream_info("s")
            assert info is not None
            tasks.append(asyncio.ensure_future(follow(rng.randint(0, info.latest_sequence))))

    await asyncio.gather(produce(writers[0], total // 2), produce(writers[1], total // 2), attach())
    await manager.end_stream("s")
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert len(results) == 25
    for start, sequences in results:
        assert sequences == list(range(start + 1, total + 1)), f"reader from {start}"


async def test_status_transitions(manager: StreamManager) -> None:
    await manager.create_writer("s", "a")
    await manager.resume_stream("s")  # already active: a no-op
    await manager.pause_stream("s")
    assert (await manager.get_stream_info("s")).status == "paused"  # type: ignore[union-attr]
    await manager.pause_stream("s")  # already there: a no-op
    await manager.resume_stream("s")
    assert (await manager.get_stream_info("s")).status == "active"  # type: ignore[union-attr]
    await manager.pause_stream("s")
    await manager.end_stream("s", output={"answer": 42})
    info = await manager.get_stream_info("s")
    assert info is not None and (info.status, info.output) == ("ended", {"answer": 42})
    await manager.end_stream("s")  # already ended: a no-op
    for action in (manager.pause_stream("s"), manager.resume_stream("s"), manager.fail_stream("s", "late")):
        with pytest.raises(StreamClosedError) as raised:
            await action
        assert raised.value.status == "ended" and raised.value.status_code == 409


async def test_write_to_ended_or_failed_stream_raises_and_stores_nothing(manager: StreamManager) -> None:
    for stream_id, close in (("e", manager.end_stream), ("f", lambda s: manager.fail_stream(s, "boom"))):
        writer = await manager.create_writer(stream_id, "a")
        buffered = await manager.create_writer(stream_id, "a", buffered=True)
        await writer.write(text("kept"))
        await close(stream_id)
        with pytest.raises(StreamClosedError):
            await writer.write(text("lost"))
        with pytest.raises(StreamClosedError):
            await writer.write_many(texts(3))
        await buffered.write(text("lost"))
        with pytest.raises(StreamClosedError):
            await buffered.flush()
        info = await manager.get_stream_info(stream_id)
        assert info is not None and info.total_chunks == 1
        assert len(await manager.get_all_chunks(stream_id)) == 1


async def test_malformed_chunk_is_rejected_and_nothing_of_the_batch_is_stored(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a")
    with pytest.raises(ChunkValidationError) as info:
        await writer.write({"type": "text_delta", "delta": 3})
    assert info.value.field == "delta"
    with pytest.raises(ChunkValidationError) as info:
        await writer.write_many([text("ok"), {"type": "tool_start", "toolName": "x"}])
    assert info.value.field == "toolCallId"
    buffered = await manager.create_writer("s", "a", buffered=True)
    with pytest.raises(ChunkValidationError):
        await buffered.write({"type": "mystery"})
    assert await buffered.flush() is None
    assert await manager.get_all_chunks("s") == []
    assert (await manager.get_stream_info("s")).total_chunks == 0  # type: ignore[union-attr]


async def test_failed_stream(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a")
    await writer.write(text("x"))
    reader = await manager.create_resumable_reader("s")
    assert reader is not None
    task = asyncio.ensure_future(drain(reader))
    await asyncio.sleep(0.01)
    await manager.fail_stream("s", "model exploded")
    assert await asyncio.wait_for(task, 5) == [1]
    assert (reader.status, reader.error) == ("failed", "model exploded")
    assert await manager.create_resumable_reader("s") is None
    assert await manager.create_reader("s") is None
    info = await manager.get_stream_info("s")
    assert info is not None and (info.status, info.error) == ("failed", "model exploded")


async def test_unknown_stream(manager: StreamManager) -> None:
    assert await manager.get_stream_info("ghost") is None
    assert await manager.create_resumable_reader("ghost", 3) is None
    assert await manager.create_reader("ghost") is None
    assert await manager.get_all_chunks("ghost") == []
    assert await manager.get_chunks_from_sequence("ghost", 2) == []
    assert await manager.get_chunks_from_step("ghost", 1) == []
    assert await manager.delete_stream("ghost") is False
    for action in (manager.end_stream("ghost"), manager.fail_stream("ghost", "x"), manager.pause_stream("ghost")):
        with pytest.raises(StreamNotFoundError) as info:
            await action
        assert info.value.status_code == 404


@pytest.mark.parametrize("bad", ["", "a b", "x{y}", "z" * 201, None, 7])
async def test_bad_stream_ids_are_rejected(manager: StreamManager, bad: object) -> None:
    with pytest.raises(ValidationError):
        await manager.create_writer(bad, "a")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        await manager.get_stream_info(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, "3", 1.5, True])
async def test_bad_resume_positions_are_rejected(manager: StreamManager, bad: object) -> None:
    await manager.create_writer("s", "a")
    with pytest.raises(ValidationError):
        await manager.create_resumable_reader("s", bad)  # type: ignore[arg-type]


async def test_pause_stops_readers_and_resume_continues(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a")
    await writer.write_many(texts(3))
    stopping = await manager.create_resumable_reader("s")
    following = await manager.create_resumable_reader("s", stop_on_pause=False)
    assert stopping is not None and following is not None
    stop_task = asyncio.ensure_future(drain(stopping))
    follow_task = asyncio.ensure_future(drain(following))
    await asyncio.sleep(0.01)
    await manager.pause_stream("s")
    assert await asyncio.wait_for(stop_task, 5) == [1, 2, 3]
    assert stopping.status == "paused"
    late = await manager.create_resumable_reader("s", 1)
    assert late is not None and await drain(late) == [2, 3]
    await manager.resume_stream("s")
    await writer.write(text("after"))
    await manager.end_stream("s")
    assert await asyncio.wait_for(follow_task, 5) == [1, 2, 3, 4]


async def test_reader_of_an_ended_stream_returns_what_is_stored(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a")
    await writer.write_many(texts(2500))
    await manager.end_stream("s")
    reader = await manager.create_resumable_reader("s", 100)
    assert reader is not None
    batches = [batch async for batch in reader.batches()]
    assert len(batches) >= 3  # handed on in pages
    assert [s for batch in batches for _, s in batch] == list(range(101, 2501))
    plain = await manager.create_reader("s")
    assert plain is not None
    chunks = await collect_all(plain)
    assert len(chunks) == 2500 and isinstance(chunks[0], TextDelta)


async def test_chunks_from_sequence_and_from_step(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a")
    await writer.begin_step(1)
    await writer.write_many(texts(3, "one"))
    await writer.begin_step(2)
    await writer.write_many(texts(2, "two"))
    assert [s for _, s in await manager.get_chunks_from_sequence("s", 3)] == [4, 5]
    assert [s for _, s in await manager.get_chunks_from_step("s", 1)] == [1, 2, 3, 4, 5]
    assert [s for _, s in await manager.get_chunks_from_step("s", 2)] == [4, 5]
    assert await manager.get_chunks_from_step("s", 3) == []
    # A new run of the session: steps restart, sequences continue.
    await manager.end_stream("s")
    await manager.reopen_stream("s")
    await writer.begin_step(1)
    await writer.write_many(texts(2, "again"))
    assert [s for _, s in await manager.get_chunks_from_step("s", 1, min_sequence=5)] == [6, 7]
    assert await manager.get_chunks_from_step("s", 2, min_sequence=5) == []  # run 1's step 2 is ignored


async def test_step_marks_in_buffered_mode_keep_their_place(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a", buffered=True)
    await writer.write_many(texts(5))
    await writer.begin_step(2)
    await writer.write_many(texts(4))
    await writer.close()
    assert [s for _, s in await manager.get_chunks_from_step("s", 2)] == [6, 7, 8, 9]


async def test_buffered_writer_batches(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a", buffered=True, flush_interval=0.05)
    for chunk in texts(15):
        assert await writer.write(chunk) is None
    assert (await manager.get_stream_info("s")).total_chunks == 0  # type: ignore[union-attr]
    await writer.write(text("sixteenth"))  # the 16th chunk sends a batch
    await asyncio.sleep(0.02)
    assert (await manager.get_stream_info("s")).total_chunks == 16  # type: ignore[union-attr]
    await writer.write(text("alone"))
    await asyncio.sleep(0.15)  # the interval sends a lone chunk
    assert (await manager.get_stream_info("s")).total_chunks == 17  # type: ignore[union-attr]
    for chunk in texts(5):
        await writer.write(chunk)
    assert await writer.flush() == 22
    await writer.write(text("last"))
    await writer.close()
    assert (await manager.get_stream_info("s")).total_chunks == 23  # type: ignore[union-attr]
    with pytest.raises(WriterClosedError):
        await writer.write(text("closed"))
    assert [c.delta for c, _ in await manager.get_all_chunks("s")][-2:] == ["t4", "last"]  # type: ignore[union-attr]


async def test_buffered_writer_high_rate_keeps_order(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a", buffered=True)
    reader = await manager.create_resumable_reader("s")
    assert reader is not None
    task = asyncio.ensure_future(collect_all(reader))
    for i in range(3000):
        await writer.write(text(str(i)))
    await writer.close()
    await manager.end_stream("s")
    got = await asyncio.wait_for(task, 10)
    assert [int(c.delta) for c, _ in got] == list(range(3000))  # type: ignore[union-attr]
    assert [s for _, s in got] == list(range(1, 3001))


async def test_delete_stream(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a")
    await writer.write(text("x"))
    reader = await manager.create_resumable_reader("s")
    assert reader is not None
    task = asyncio.ensure_future(drain(reader))
    await asyncio.sleep(0.01)
    assert await manager.delete_stream("s") is True
    with pytest.raises(StreamNotFoundError):
        await asyncio.wait_for(task, 5)
    assert await manager.get_stream_info("s") is None
    assert await manager.get_all_chunks("s") == []
    with pytest.raises(StreamNotFoundError):
        await writer.write(text("y"))


async def test_reopen_continues_sequences(manager: StreamManager) -> None:
    writer = await manager.create_writer("s", "a")
    await writer.write_many(texts(3))
    await manager.fail_stream("s", "first run failed")
    await manager.reopen_stream("s")
    info = await manager.get_stream_info("s")
    assert info is not None and (info.status, info.error, info.latest_sequence) == ("active", None, 3)
    assert await writer.write(text("next run")) == 4
    await manager.end_stream("s")
    assert (await manager.get_stream_info("s")).status == "ended"  # type: ignore[union-attr]


async def test_ttl_expires_ended_streams(backend_factory) -> None:  # type: ignore[no-untyped-def]
    manager = await backend_factory(ttl=0.3)
    writer = await manager.create_writer("s", "a")
    await writer.write(text("x"))
    await manager.end_stream("s")
    assert await manager.get_stream_info("s") is not None
    await asyncio.sleep(0.45)
    assert await manager.get_stream_info("s") is None
    assert await manager.get_all_chunks("s") == []


async def test_active_ttl_expires_abandoned_streams(backend_factory) -> None:  # type: ignore[no-untyped-def]
    manager = await backend_factory(active_ttl=0.3)
    writer = await manager.create_writer("s", "a")
    for _ in range(3):
        await asyncio.sleep(0.15)
        await writer.write(text("keeps it alive"))
    assert await manager.get_stream_info("s") is not None
    await asyncio.sleep(0.45)
    assert await manager.get_stream_info("s") is None


async def test_max_length_trims_and_an_expired_position_is_reported(backend_factory) -> None:  # type: ignore[no-untyped-def]
    manager = await backend_factory(max_length=100)
    writer = await manager.create_writer("s", "a")
    for _ in range(10):
        await writer.write_many(texts(100))
    stored = await manager.get_all_chunks("s")
    assert 100 <= len(stored) < 1000
    assert [s for _, s in stored] == list(range(1001 - len(stored), 1001))
    with pytest.raises(SequenceExpiredError) as info:
        await manager.create_resumable_reader("s", 5)
    assert info.value.earliest == stored[0][1] and info.value.status_code == 410
    reader = await manager.create_resumable_reader("s", 995)
    assert reader is not None
    await manager.end_stream("s")
    assert await drain(reader) == [996, 997, 998, 999, 1000]


async def test_a_fenced_out_writer_cannot_store_a_single_chunk(manager: StreamManager) -> None:
    old = await manager.create_writer("f", "attempt-1", epoch=1)
    assert await old.write(text("one")) == 1
    await old.begin_step(2)
    new = await manager.create_writer("f", "attempt-2", epoch=2)
    assert await manager.fence("f", 2) == 1
    for attempt in (old.write(text("late")), old.write_many(texts(3)), old.begin_step(3)):
        with pytest.raises(StreamSupersededError) as info:
            await attempt
        assert (info.value.epoch, info.value.current_epoch, info.value.code) == (1, 2, "EXECUTOR_SUPERSEDED")
    for transition in (manager.end_stream("f", epoch=1), manager.fail_stream("f", "x", epoch=1)):
        with pytest.raises(StreamSupersededError):
            await transition
    with pytest.raises(StreamSupersededError):
        await manager.fence("f", 1)
    assert await new.write(text("two")) == 2
    state = await manager.get_stream_info("f")
    assert state is not None and (state.status, state.latest_sequence, state.epoch) == ("active", 2, 2)
    assert [c.delta for c, _ in await manager.get_all_chunks("f")] == ["one", "two"]  # type: ignore[union-attr]
    await manager.end_stream("f", epoch=2)


async def test_a_fenced_out_buffered_writer_loses_its_whole_buffer(manager: StreamManager) -> None:
    old = await manager.create_writer("g", "attempt-1", buffered=True, flush_size=1000, flush_interval=60, epoch=3)
    await old.write_many(texts(10))
    await manager.fence("g", 4)
    with pytest.raises(StreamSupersededError):
        await old.flush()
    assert await manager.get_all_chunks("g") == []


async def test_a_newer_epoch_takes_the_stream_by_writing_and_epochs_outlive_runs(manager: StreamManager) -> None:
    first = await manager.create_writer("h", "run-1", epoch=5)
    await first.write(text("a"))
    await manager.end_stream("h", epoch=5)
    await manager.reopen_stream("h")  # the session's next run: its epochs continue above 5
    stale = await manager.create_writer("h", "zombie", epoch=4)
    with pytest.raises(StreamSupersededError):
        await stale.write(text("b"))
    unfenced = await manager.create_writer("h", "tool")
    assert await unfenced.write(text("c")) == 2  # a writer without an epoch is not fenced
    with pytest.raises(StreamNotFoundError):
        await manager.fence("nope", 1)


async def test_a_deleted_streams_writers_store_nothing_in_the_stream_created_again(manager: StreamManager) -> None:
    """A session deleted while its run writes, and created again by a new run: the new stream's
    epochs start over, so only its holder tells it from the old one."""
    await manager.open_stream("x", "run-1")
    old = await manager.create_writer("x", "run-1", epoch=1, holder="run-1")
    buffered = await manager.create_writer(
        "x", "run-1", buffered=True, flush_size=1000, flush_interval=60, epoch=1, holder="run-1"
    )
    assert await manager.fence("x", 1, holder="run-1") == 0
    assert await old.write(text("old")) == 1
    await buffered.write_many(texts(3, "buffered"))
    assert await manager.delete_stream("x")
    late = await manager.create_writer("x", "run-1", epoch=1, holder="run-1")  # an error report, say
    with pytest.raises(StreamNotFoundError):
        await late.write(text("error"))
    assert await manager.get_stream_info("x") is None  # a writer with a holder creates no stream

    await manager.open_stream("x", "run-2")
    new = await manager.create_writer("x", "run-2", epoch=1, holder="run-2")
    assert await manager.fence("x", 1, holder="run-2") == 0
    assert await new.write(text("new")) == 1
    for refused in (
        old.write(text("late")),
        old.write_many(texts(2, "late")),
        old.begin_step(2),
        buffered.flush(),
        late.write(text("error")),
        manager.fence("x", 2, holder="run-1"),
        manager.pause_stream("x", epoch=9, holder="run-1"),  # a newer epoch changes nothing
        manager.fail_stream("x", "the old run's error", epoch=1, holder="run-1"),
        manager.end_stream("x", output="the old answer", epoch=1, holder="run-1"),
    ):
        with pytest.raises(StreamSupersededError) as info:
            await refused
        assert (info.value.holder, info.value.code) == ("run-2", "EXECUTOR_SUPERSEDED")
    state = await manager.get_stream_info("x")
    assert state is not None and (state.status, state.latest_sequence, state.epoch) == ("active", 1, 1)
    assert (state.error, state.holder) == (None, "run-2")  # nothing of the old run's error either
    assert [c.delta for c, _ in await manager.get_all_chunks("x")] == ["new"]  # type: ignore[union-attr]
    assert await manager.get_chunks_from_step("x", 2) == []
    await manager.end_stream("x", output="the new answer", epoch=1, holder="run-2")
    ended = await manager.get_stream_info("x")
    assert ended is not None and (ended.status, ended.output) == ("ended", "the new answer")


async def test_opening_a_stream_for_the_next_run_shuts_the_run_before_out(manager: StreamManager) -> None:
    await manager.open_stream("o", "run-1")
    first = await manager.create_writer("o", "run-1", epoch=1, holder="run-1")
    assert await first.write(text("a")) == 1
    await manager.fail_stream("o", "boom", epoch=1, holder="run-1")
    await manager.open_stream("o", "run-2")  # the session's next run: sequences go on
    state = await manager.get_stream_info("o")
    assert state is not None
    assert (state.status, state.latest_sequence, state.error, state.holder) == ("active", 1, None, "run-2")
    for refused in (first.write(text("late")), manager.end_stream("o", epoch=1, holder="run-1")):
        with pytest.raises(StreamSupersededError):
            await refused
    second = await manager.create_writer("o", "run-2", epoch=2, holder="run-2")
    assert await second.write(text("b")) == 2
    unbound = await manager.create_writer("o", "tool")
    assert await unbound.write(text("c")) == 3  # a writer without a holder is not checked
    await manager.open_stream("o", "run-2")  # again, as a retry would: nothing changes
    assert await second.write(text("d")) == 4
    plain = await manager.create_writer("p", "agent")  # a stream never opened for a holder
    await plain.write(text("e"))
    bound = await manager.create_writer("p", "run-9", holder="run-9")
    assert await bound.write(text("f")) == 2
    with pytest.raises(ValidationError):
        await manager.open_stream("o", "")


async def test_marks_of_alive_runs_lapse_after_their_time_unless_renewed(manager: StreamManager) -> None:
    assert await manager.alive([]) == set()
    await manager.mark_alive(["r1", "r2"], 0.3)
    await manager.mark_alive(["r3"], 5)
    assert await manager.alive(["r1", "r2", "r3", "r4"]) == {"r1", "r2", "r3"}
    await asyncio.sleep(0.2)
    await manager.mark_alive(["r1"], 0.3)  # renewed: a new lapse time
    await asyncio.sleep(0.2)
    assert await manager.alive(["r1", "r2", "r3"]) == {"r1", "r3"}
    await asyncio.sleep(0.2)
    assert await manager.alive(["r1", "r3"]) == {"r3"}
