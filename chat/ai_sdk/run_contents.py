"""What recently resumed runs have shown, kept per process and extended as the runs grow.

A resume from the middle of a run (a page refresh, a dropped connection) replays what the run
showed up to the client's position, rebuilt from every chunk of the run up to there: for a run of
thousands of chunks, milliseconds of reading and folding, paid again by every reconnect of a
flaky network and by every tab open on the session. A stream is append-only, so what a run showed
up to sequence S stays what it was: the next resume of the run reads only the chunks after S.

One thing rewrites the past: a ``step_discarded`` chunk, written when an attempt takes over from a
worker that died mid-step, voids the chunks of that step. When one among the new chunks voids any
chunk at or before S, the content is rebuilt from the run's start.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from chat.ai_sdk.partial import PartialContent, copy_partial_content, extend_partial_content, rebuild_partial_content
from chat.ai_sdk.snapshot import discarded_ranges, without_discarded
from chat.ai_sdk.state import RunInfo
from streams.backends.base import StreamManager

__all__ = ["RunContents", "run_contents"]


@dataclass(frozen=True, slots=True)
class _Shown:
    content: PartialContent  # never changed once kept: extended on a copy
    sequence: int  # the last sequence folded into it


class RunContents:
    """The partial content of the ``size`` runs resumed last, by stream store, session and run."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._kept: OrderedDict[tuple[Any, ...], _Shown] = OrderedDict()
        self._lock = threading.Lock()  # a process may run several event loops (threads)
        self._building: set[asyncio.Future[PartialContent]] = set()  # held until done
        # The rebuilds from a run's start under way: their position and what they make.
        self._rebuilding: dict[tuple[Any, ...], tuple[int, asyncio.Future[_Shown]]] = {}

    async def up_to(self, manager: StreamManager, session_id: str, run: RunInfo, sequence: int) -> PartialContent:
        """What ``run`` showed up to ``sequence`` (its chunks from its start up to there, less the
        voided ones). The caller only reads the content it gets.

        A caller that goes away meanwhile (a client closing its resume) leaves the content to be
        built and kept all the same: a client that dropped its connection is the one that comes
        back, and the reply of the read is on its way already."""
        building = asyncio.ensure_future(self._build(manager, session_id, run, sequence))
        self._building.add(building)
        building.add_done_callback(self._settled)
        return await asyncio.shield(building)

    def _settled(self, building: asyncio.Future[PartialContent]) -> None:
        self._building.discard(building)
        if not building.cancelled():
            building.exception()  # taken: a build whose caller left fails without a log line

    async def _build(self, manager: StreamManager, session_id: str, run: RunInfo, sequence: int) -> PartialContent:
        key = (manager, session_id, run.run_id, run.start_sequence)
        loop = asyncio.get_running_loop()
        with self._lock:
            shown = self._kept.get(key)
            rebuilding = self._rebuilding.get(key)
        if (shown is None or shown.sequence > sequence) and rebuilding is not None:
            at, building = rebuilding
            if building.get_loop() is loop and at <= sequence:
                # The run is being rebuilt up to a position at or before this one (the reconnects
                # of a restart, the tabs of one session): extend what that rebuild makes, or fail
                # with it, instead of reading and folding the same chunks again at the same time.
                shown = await asyncio.shield(building)
        if shown is not None and shown.sequence <= sequence:
            if shown.sequence == sequence:
                self._keep(key, shown)
                return shown.content
            chunks = await manager.get_chunks_from_sequence(session_id, shown.sequence, up_to=sequence)
            if all(low > shown.sequence for low, _ in discarded_ranges(chunks)):
                content = extend_partial_content(copy_partial_content(shown.content), without_discarded(chunks))
                self._keep(key, _Shown(content, chunks[-1][1] if chunks else shown.sequence))
                return content
        return await self._rebuild(key, manager, session_id, run, sequence)

    async def _rebuild(
        self, key: tuple[Any, ...], manager: StreamManager, session_id: str, run: RunInfo, sequence: int
    ) -> PartialContent:
        """What ``run`` showed up to ``sequence``, from its start; resumes of the run meanwhile
        take what it makes (or its error) from ``self._rebuilding``."""
        building: asyncio.Future[_Shown] = asyncio.get_running_loop().create_future()
        building.add_done_callback(_retrieved)  # a rebuild no one waited for fails without a log line
        with self._lock:
            self._rebuilding[key] = (sequence, building)
        try:
            chunks = await manager.get_chunks_from_sequence(session_id, run.start_sequence, up_to=sequence)
            shown = _Shown(
                rebuild_partial_content(without_discarded(chunks)), chunks[-1][1] if chunks else run.start_sequence
            )
        except Exception as exc:
            building.set_exception(exc)
            raise
        except BaseException:  # cancelled (its loop closing): so are the resumes waiting on it
            building.cancel()
            raise
        else:
            building.set_result(shown)
            self._keep(key, shown)
            return shown.content
        finally:
            with self._lock:
                if self._rebuilding.get(key, (0, None))[1] is building:
                    del self._rebuilding[key]

    def _keep(self, key: tuple[Any, ...], shown: _Shown) -> None:
        with self._lock:
            kept = self._kept.get(key)
            if kept is None or kept.sequence <= shown.sequence:  # a slower resume keeps the furthest
                self._kept[key] = shown
            self._kept.move_to_end(key)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


def _retrieved(building: asyncio.Future[Any]) -> None:
    if not building.cancelled():
        building.exception()


#: The process's runs' contents, for :func:`chat.ai_sdk.resume.resume_run_stream`.
run_contents = RunContents()
