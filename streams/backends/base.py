"""The stream store interface every backend implements, and what it builds on the hooks.

A *stream* is an append-only log of chunks addressed by a stream id (a chat session id). The store
gives each chunk a sequence number (1, 2, 3, … with no gap), keeps the stream's status
(``active`` ⇄ ``paused`` → ``ended`` | ``failed``), and serves the chunks to any number of readers,
live. :class:`StreamManager` is that interface: backends supply storage through a handful of
private hooks (``_ensure_stream``, ``_append``, ``_read_page``, ``_step_start``, ``_subscribe``),
the status changes and the liveness marks of running runs; on the hooks it builds writers
(:mod:`~streams.backends.writers`, :mod:`~streams.backends.buffered`), readers
(:mod:`~streams.backends.readers`) and bulk reads.
The values passed around live in :mod:`~streams.backends.records`.

Writes are fenced two ways, each checked in the store's atomic step with the write: by *epoch*
(an attempt at a run refuses the writes of the attempts before it, see :meth:`StreamManager.fence`)
and by *holder* (a stream opened for one producer, a run, refuses the writes made for another,
see :meth:`StreamManager.open_stream`). An id's stream deleted and created again starts its
epochs over, but it is opened for a new holder: the holder is what keeps a deleted session's run
out of the stream of a new session with the same id.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

from streams.backends.buffered import BufferedStreamWriter
from streams.backends.readers import ResumableStreamReader, StreamReader, Subscription
from streams.backends.records import ReadPage, StreamInfo, WriteBatch, validate_stream_id
from streams.backends.writers import StreamWriter
from streams.exceptions import ValidationError
from streams.protocol import StoredChunk

__all__ = ["StreamManager"]


class StreamManager(abc.ABC):
    """The stream store. Backends subclass it; see ``streams.backends`` for choosing one."""

    #: Options a backend accepts from ``HELIX["STREAMS"]["OPTIONS"]``, checked by system checks.
    option_names: ClassVar[frozenset[str]] = frozenset()

    #: Chunks a reader fetches per round trip. Small pages: a resumed reader starts quickly, and
    #: a page is what a reader holds while its client does not read (with 1,000-chunk pages a
    #: slow client made a web process hold ~1.2 MB; with 128, ~0.12 MB).
    page_size: int = 128
    #: Chunks fetched per round trip by ``get_chunks_from_sequence`` and friends.
    bulk_page_size: int = 10_000
    #: Seconds a live reader keeps retrying an unreachable backend before it raises.
    retry_timeout: float = 30.0

    # -- writing ---------------------------------------------------------------------------

    async def create_writer(
        self,
        stream_id: str,
        agent_id: str,
        agent_type: str | None = None,
        *,
        buffered: bool = False,
        flush_size: int = 16,
        flush_interval: float = 0.005,
        epoch: int | None = None,
        holder: str | None = None,
    ) -> StreamWriter:
        """A writer for ``stream_id``; the stream is created (``active``) if it does not exist.

        With ``buffered=True`` writes return at once and are stored in batches: every
        ``flush_size`` chunks, ``flush_interval`` seconds after the first unflushed chunk, on
        ``flush()`` and on ``close()``. With an ``epoch`` the writer is fenced: see :meth:`fence`.
        With a ``holder`` it writes only to the stream opened for ``holder`` (see
        :meth:`open_stream`), and never creates one: a stream deleted under it stays deleted.
        """
        validate_stream_id(stream_id)
        if holder is None:
            await self._ensure_stream(stream_id)
        if buffered:
            return BufferedStreamWriter(
                self,
                stream_id,
                agent_id,
                agent_type,
                flush_size=flush_size,
                flush_interval=flush_interval,
                epoch=epoch,
                holder=holder,
            )
        return StreamWriter(self, stream_id, agent_id, agent_type, epoch=epoch, holder=holder)

    async def open_stream(self, stream_id: str, holder: str) -> None:
        """Open the stream for its next producer ``holder`` (the run about to write to it): create
        it ``active`` if it does not exist, else make it ``active`` again (its sequences continue,
        its error and output are cleared) and hand it to ``holder``, in one atomic step.

        From then on every write, step mark, status change and fence made for another holder is
        rejected with :class:`StreamSupersededError`, like a superseded epoch: an earlier run of
        the stream's session, or a run of an earlier stream of the same id (deleted, then created
        again), can store nothing in it. Operations that name no holder, and streams never opened
        for one (made by a writer without a holder), are not checked.
        """
        validate_stream_id(stream_id)
        if not isinstance(holder, str) or not holder:
            raise ValidationError(f"A stream's holder must be a non-empty string, not {holder!r}")
        await self._open_stream(stream_id, holder)

    @abc.abstractmethod
    async def fence(self, stream_id: str, epoch: int, *, holder: str | None = None) -> int:
        """Raise the stream's fencing epoch to ``epoch`` and return its latest sequence.

        From then on every write, step mark and status change that carries an older epoch is
        rejected with :class:`StreamSupersededError`, atomically (the check and the write are
        one operation in the store). A fenced write with a newer epoch raises the stream's epoch
        itself. Raises :class:`StreamSupersededError` if the stream already has a newer epoch, or
        is open for another holder than ``holder`` (see :meth:`open_stream`),
        :class:`StreamNotFoundError` if it does not exist. Epochs only grow, across runs too;
        not across streams: one deleted and created again starts over at 0.
        """

    # -- reading ---------------------------------------------------------------------------

    async def first_page(self, stream_id: str, from_sequence: int) -> ReadPage | None:
        """The first page a reader from ``from_sequence`` would read, with the stream's status,
        latest sequence and error as of that read (one round trip); ``None`` for a missing stream.
        Hand it to :meth:`create_resumable_reader` to decide on the stream and read it in one go."""
        self._check_position(from_sequence)
        validate_stream_id(stream_id)
        return await self._read_page(stream_id, from_sequence, self.page_size)

    @staticmethod
    def _check_position(from_sequence: object) -> None:
        if not isinstance(from_sequence, int) or isinstance(from_sequence, bool) or from_sequence < 0:
            raise ValidationError(f"from_sequence must be a non-negative integer, not {from_sequence!r}")

    async def create_resumable_reader(
        self,
        stream_id: str,
        from_sequence: int = 0,
        *,
        stop_on_pause: bool = True,
        first_page: ReadPage | None = None,
    ) -> ResumableStreamReader | None:
        """A reader yielding ``(chunk, sequence)`` for every chunk after ``from_sequence``.

        It tails live chunks until the stream ends or fails (and, with ``stop_on_pause``, until
        it pauses at a human-in-the-loop boundary). ``None`` for a missing or failed stream.
        ``first_page``: what :meth:`first_page` read for this stream and position, if the caller
        has it already.
        """
        self._check_position(from_sequence)
        validate_stream_id(stream_id)
        page = first_page if first_page is not None else await self._read_page(stream_id, from_sequence, self.page_size)
        if page is None or page.status == "failed":
            return None
        return ResumableStreamReader(self, stream_id, from_sequence, page, stop_on_pause=stop_on_pause)

    def watch(self, stream_id: str) -> Subscription:
        """Notifications that ``stream_id`` changed (chunks written, its status changed, opened
        for a new run), for a caller that reads the stream's state itself rather than its chunks,
        such as a session's feed. ``await ready()`` before the first read of the state, then
        ``wait()`` for each change; ``close()`` when done. Notifications may be merged or, while
        the store is unreachable, lost: a watcher reads the state again now and then."""
        validate_stream_id(stream_id)
        return self._subscribe(stream_id)

    async def create_reader(self, stream_id: str) -> StreamReader | None:
        """A reader yielding every chunk of the stream from its start, then live ones until it ends."""
        reader = await self.create_resumable_reader(stream_id, 0)
        return None if reader is None else StreamReader(reader)

    async def get_all_chunks(self, stream_id: str) -> list[StoredChunk]:
        """Every stored chunk of the stream with its sequence (``[]`` for an unknown stream)."""
        return await self.get_chunks_from_sequence(stream_id, 0)

    async def get_chunks_from_sequence(
        self, stream_id: str, after_sequence: int, up_to: int | None = None
    ) -> list[StoredChunk]:
        """Stored chunks with a sequence greater than ``after_sequence`` (and at most ``up_to``)."""
        result: list[StoredChunk] = []
        cursor = after_sequence
        while up_to is None or cursor < up_to:
            limit = self.bulk_page_size if up_to is None else min(self.bulk_page_size, up_to - cursor)
            page = await self._read_page(stream_id, cursor, limit)
            if page is None:
                return result
            result.extend(page.chunks)
            if len(page.chunks) < limit:
                break
            cursor = page.chunks[-1][1]
        if up_to is not None and result and result[-1][1] > up_to:
            result = [item for item in result if item[1] <= up_to]
        return result

    async def get_chunks_from_step(self, stream_id: str, step: int, *, min_sequence: int = 0) -> list[StoredChunk]:
        """Stored chunks from the start of ``step`` on, as marked by ``writer.begin_step``.

        Step numbers restart with every run of a session: pass the run's start sequence as
        ``min_sequence`` so a mark left by an earlier run is ignored. ``[]`` if the step has not
        begun (after ``min_sequence``).
        """
        start = await self._step_start(stream_id, step)
        if start is None or start <= min_sequence:
            return []
        return await self.get_chunks_from_sequence(stream_id, start - 1)

    # -- lifecycle -------------------------------------------------------------------------

    @abc.abstractmethod
    async def get_stream_info(self, stream_id: str) -> StreamInfo | None:
        """Status, size and error of the stream; ``None`` if it does not exist."""

    @abc.abstractmethod
    async def end_stream(
        self, stream_id: str, output: Any = None, *, epoch: int | None = None, holder: str | None = None
    ) -> None:
        """Mark the stream ended (optionally with a final ``output``); readers finish. Like every
        status change, fenced when given an ``epoch`` (see :meth:`fence`) or a ``holder`` (see
        :meth:`open_stream`)."""

    @abc.abstractmethod
    async def fail_stream(
        self, stream_id: str, error: str, *, epoch: int | None = None, holder: str | None = None
    ) -> None:
        """Mark the stream failed with ``error``; readers finish."""

    @abc.abstractmethod
    async def pause_stream(self, stream_id: str, *, epoch: int | None = None, holder: str | None = None) -> None:
        """Mark an active stream paused (a run waits on a human)."""

    @abc.abstractmethod
    async def resume_stream(self, stream_id: str, *, epoch: int | None = None, holder: str | None = None) -> None:
        """Mark a paused stream active again."""

    @abc.abstractmethod
    async def reopen_stream(self, stream_id: str) -> None:
        """Make an ended, failed or paused stream active again (the next run of its session).

        Sequences continue where they stopped; the error and output are cleared.
        """

    @abc.abstractmethod
    async def delete_stream(self, stream_id: str) -> bool:
        """Remove the stream and everything stored for it; ``False`` if it did not exist."""

    # -- liveness --------------------------------------------------------------------------

    @abc.abstractmethod
    async def mark_alive(self, run_ids: list[str], seconds: float) -> None:
        """Mark the runs ``run_ids`` alive for ``seconds`` (their worker's heartbeat, in one round
        trip). Kept here rather than in the database so that a database stall does not silence a
        worker that is still running its runs: the reaper takes over only runs whose database
        lease has expired *and* whose mark here has lapsed."""

    @abc.abstractmethod
    async def alive(self, run_ids: list[str]) -> set[str]:
        """Which of ``run_ids`` carry a mark that has not lapsed (one round trip)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections and background tasks held by this manager."""

    # -- backend hooks ---------------------------------------------------------------------

    @abc.abstractmethod
    async def _ensure_stream(self, stream_id: str) -> None:
        """Create the stream as ``active`` if it does not exist."""

    @abc.abstractmethod
    async def _open_stream(self, stream_id: str, holder: str) -> None:
        """Create the stream for ``holder``, or reactivate it and hand it to ``holder`` (see
        :meth:`open_stream`), atomically."""

    @abc.abstractmethod
    async def _append(
        self, stream_id: str, batch: WriteBatch, epoch: int | None = None, holder: str | None = None
    ) -> int:
        """Store ``batch`` atomically; return the stream's latest sequence after it. With an
        ``epoch`` or a ``holder``, store nothing and raise :class:`StreamSupersededError` if the
        stream's epoch is newer or it is open for another holder."""

    @abc.abstractmethod
    async def _read_page(self, stream_id: str, after_sequence: int, limit: int) -> ReadPage | None:
        """Up to ``limit`` chunks after ``after_sequence`` and the stream's state, read together.

        ``None`` if the stream does not exist. Chunks trimmed by ``max_length`` are skipped: the
        first one returned may then follow ``after_sequence`` with a gap.
        """

    @abc.abstractmethod
    async def _step_start(self, stream_id: str, step: int) -> int | None:
        """The sequence of the first chunk of the latest mark of ``step``."""

    @abc.abstractmethod
    def _subscribe(self, stream_id: str) -> Subscription:
        """Change notifications of ``stream_id`` (a reader's, or a watcher's)."""

    async def _positions(self, stream_ids: list[str]) -> dict[str, tuple[str, int] | None]:
        """Each stream's status and latest sequence (``None``: gone), to check readers that heard
        nothing for a while; a store that can should read them in one round trip."""
        infos = [await self.get_stream_info(stream_id) for stream_id in stream_ids]
        return {
            stream_id: (info.status, info.latest_sequence) if info is not None else None
            for stream_id, info in zip(stream_ids, infos, strict=True)
        }
