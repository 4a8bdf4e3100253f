"""Benchmark of the live fan-out hot path: stored chunks → AI SDK events → SSE bytes.

    python -m bench.transformer [--chunks 10000] [--repeat 7]

A representative run (:func:`bench.bridge.run_chunks`: per 50 chunks, 5 reasoning pieces, 43 text
deltas, one tool call and its result) goes through ``StreamTransformer`` and ``ui_message_stream``
exactly as a reader's batches do: in pages of 1 chunk (a live reader woken for each chunk) and of
100 (a reader catching up). The baseline, timed in the same process, does the least the same job
can cost: the very same events, already built as plain dicts, each encoded with
``msgspec.json.encode`` and framed as ``id: <sequence>`` + ``data:``. ``ratio`` is our events/s
over the baseline's; it moves with what the transformer and framer add, not with the machine. The
body's digest shows whether a change altered a byte of what clients receive.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from bench.bridge import run_chunks
from chat.ai_sdk.sse import ui_message_stream
from chat.ai_sdk.transformer import StreamTransformer
from streams.protocol import StoredChunk, stored_chunks

Page = list[StoredChunk]


def pages_of(chunks: list[StoredChunk], size: int) -> list[Page]:
    return [chunks[offset : offset + size] for offset in range(0, len(chunks), size)]


def wire_events(pages: list[Page]) -> list[list[tuple[int, Any]]]:
    """The events of each page as plain dicts, with the sequence of the chunk they come from.
    The dicts are decoded from JSON, so they are built the same way whatever the events were."""
    transformer = StreamTransformer(message_id="m")
    plain = msgspec.json.Decoder().decode
    out = []
    for page in pages:
        out.append(
            [
                (sequence, plain(msgspec.json.encode(event)))
                for chunk, sequence in page
                for event in transformer.transform(chunk, sequence)[0]
            ]
        )
    out[-1] += [(-1, plain(msgspec.json.encode(event))) for event in transformer.finalize()]
    return out


async def ours(pages: list[Page], digest: Any = None) -> float:
    async def source() -> AsyncIterator[Page]:
        for page in pages:
            yield page

    start = time.perf_counter()
    async for part in ui_message_stream(source(), StreamTransformer(message_id="m")):
        if digest is not None:
            digest.update(part)
    return time.perf_counter() - start


async def baseline(events: list[list[tuple[int, Any]]]) -> float:
    async def source() -> AsyncIterator[list[tuple[int, Any]]]:
        for page in events:
            yield page

    encode = msgspec.json.Encoder().encode
    start = time.perf_counter()
    async for page in source():
        b"".join([b"id: %d\ndata: %s\n\n" % (sequence, encode(event)) for sequence, event in page])
    return time.perf_counter() - start


async def measure(count: int, page_size: int, repeat: int) -> tuple[int, float, float, str]:
    stored = stored_chunks(list(run_chunks(count)), 1)
    pages = pages_of(stored, page_size)
    events = wire_events(pages)
    total = sum(len(page) for page in events)
    digest = hashlib.sha256()
    await ours(pages, digest), await baseline(events)  # warm up, and the body's digest
    our_times, base_times = [], []
    for _ in range(repeat):  # interleaved, so both see the same load on a shared machine
        gc.collect()  # each starts with a clean heap, not with what the other left
        our_times.append(await ours(pages))
        gc.collect()
        base_times.append(await baseline(events))
    return total, total / statistics.median(our_times), total / statistics.median(base_times), digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print("| pages of | events | helix events/s | baseline events/s | ratio | body sha256 |\n|---|---|---|---|---|---|")
    for page_size in (1, 100):
        total, our_rate, base_rate, digest = asyncio.run(measure(args.chunks, page_size, args.repeat))
        print(
            f"| {page_size} chunk{'s' if page_size > 1 else ''} | {total:,} | {our_rate:,.0f} | {base_rate:,.0f} "
            f"| {our_rate / base_rate:.2f} | {digest[:16]} |"
        )


if __name__ == "__main__":
    main()
