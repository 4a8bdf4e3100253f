"""What the AI SDK bridge reads from the database: a session's messages, state, latest run and
latest checkpoint (:class:`~chat.ai_sdk.state.StateStore` on the chat models)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import F, OuterRef, QuerySet, Subquery

from chat.ai_sdk.state import CheckpointInfo, MessagePage, RunInfo, StateStore, ToolDecision
from chat.models import ChatSession, Checkpoint, Message, PendingCall, Run
from chat.session_ids import record_id, session_key
from chat.state.compiled import CompiledRead, read_ahead
from chat.state.db import MOST_PER_HOP, db

__all__ = [
    "LATEST_RUN_COLUMNS",
    "DjangoStateReader",
    "current_run",
    "current_run_and_owner",
    "latest_runs",
    "read_current_runs_ahead",
    "run_info",
]


_RUN_FIELDS = ("id", "status", "start_sequence", "step_count", "message_id", "message_offset")
#: The columns of a session's latest run in a query of :func:`latest_runs`, as :func:`run_info` takes them.
LATEST_RUN_COLUMNS = tuple(f"runs__{field}" for field in _RUN_FIELDS)
_LATEST_RUN_AND_OWNER = CompiledRead(
    Run,
    lambda key: Run.objects.for_session(key).latest_first().values_list(*_RUN_FIELDS, "session__owner_id")[:1],
)


def current_run(session_id: str) -> RunInfo | None:
    """The session's latest run, read on the calling thread (a database thread: see
    :func:`chat.state.db.db`), so a caller can make it part of a hop it makes anyway."""
    found = current_run_and_owner(session_id)
    return found[0] if found is not None else None


def current_run_and_owner(session_id: str) -> tuple[RunInfo, Any] | None:
    """The session's latest run and the session's owner id, in one query on the calling thread
    (a resume needs both, and a reconnect storm is thousands of resumes); ``None`` when the
    session has no run (or does not exist)."""
    key = session_key(session_id)
    if key is None:
        return None
    rows = _LATEST_RUN_AND_OWNER.rows(key)
    if not rows:
        return None
    *run, owner_id = rows[0]
    return run_info(run), owner_id


def run_info(columns: Sequence[Any]) -> RunInfo:
    """The run whose :data:`LATEST_RUN_COLUMNS` are ``columns``."""
    run_id, status, start_sequence, step_count, message_id, message_offset = columns
    return RunInfo(str(run_id), status, start_sequence, step_count, message_id or None, message_offset)


def latest_runs(keys: Sequence[str]) -> QuerySet[ChatSession]:
    """The sessions of ``keys`` that have a run, each joined to its latest run (whose columns are
    :data:`LATEST_RUN_COLUMNS`)."""
    # Each session's latest run found once, by a seek on the Run index on session and creation,
    # and then read by its key: a resume costs the same however many runs its session has had.
    # (Keeping those of the sessions' runs that are their session's latest instead looks up the
    # latest once for every run of the session.) PostgreSQL may plan it as a hash join over all
    # runs while that table is small: a few ms a hop at worst (see docs/benchmarks.md).
    latest = Run.objects.filter(session_id=OuterRef("pk")).latest_first().values("pk")[:1]
    return (
        ChatSession.objects.filter(pk__in=keys).annotate(latest_run=Subquery(latest)).filter(runs__pk=F("latest_run"))
    ).order_by()


def _latest_runs_and_owners(*keys: str) -> Any:
    return latest_runs(keys).values_list("pk", *LATEST_RUN_COLUMNS, "owner_id")


#: The latest run and owner of several sessions: one compiled form per power of two of them.
_LATEST_RUNS_AND_OWNERS = CompiledRead(ChatSession, _latest_runs_and_owners)


def read_current_runs_ahead(session_ids: list[str]) -> None:
    """The reads of :func:`current_run_and_owner` for all of ``session_ids``, in one query per
    hop's worth of them, kept for the calls of this hop (:func:`chat.state.compiled.shared_reads`): the
    resumes of a reconnect storm, many per hop."""
    keys = (key for key in map(session_key, session_ids) if key is not None)
    read_ahead(_LATEST_RUN_AND_OWNER, _LATEST_RUNS_AND_OWNERS, keys, per_query=MOST_PER_HOP, most=1)


class DjangoStateReader(StateStore):
    """Sessions read for the bridge, each read one database hop in a worker thread."""

    async def session_exists(self, session_id: str) -> bool:
        key = session_key(session_id)
        return key is not None and await db(ChatSession.objects.filter(pk=key).exists)()

    async def get_messages(self, session_id: str, offset: int = 0, limit: int | None = None) -> MessagePage:
        key = session_key(session_id)
        if key is None:
            return MessagePage([], False, 0)

        def read() -> MessagePage:
            query = Message.objects.for_session(key)
            total = query.count()
            end = total if limit is None else offset + limit
            return MessagePage([m.to_stored() for m in query[offset:end]], end < total, total)

        return await db(read)()

    async def get_state(self, session_id: str) -> dict[str, Any]:
        key = session_key(session_id)
        if key is None:
            return {}
        session = await db(ChatSession.objects.filter(pk=key).only("state").first)()
        return dict(session.state) if session else {}

    async def get_current_run(self, session_id: str) -> RunInfo | None:
        return await db(current_run)(session_id)

    async def get_checkpoint(self, session_id: str) -> CheckpointInfo | None:
        key = session_key(session_id)
        if key is None:
            return None

        def read() -> CheckpointInfo | None:
            run = Run.objects.for_session(key).latest_first().first()
            checkpoint = Checkpoint.objects.filter(run=run).order_by("-step").first() if run else None
            if checkpoint is None:
                return None
            return CheckpointInfo(
                str(checkpoint.id), checkpoint.step, checkpoint.message_count, checkpoint.stream_sequence
            )

        return await db(read)()

    async def get_tool_decisions(self, session_id: str) -> dict[str, ToolDecision]:
        key = session_key(session_id)
        if key is None:
            return {}
        fields = ("tool_call_id", "id", "kind", "status", "reason", "applied")
        calls = PendingCall.objects.filter(session_id=key).order_by("created_at")  # the latest wins
        rows = await db(lambda: list(calls.values_list(*fields)))()
        return {
            call_id: ToolDecision(call_id, str(approval_id), kind, status, reason, applied)
            for call_id, approval_id, kind, status, reason, applied in rows
        }

    async def find_checkpoint(self, session_id: str, checkpoint_id: str) -> CheckpointInfo | None:
        key, pk = session_key(session_id), record_id(checkpoint_id)
        if key is None or pk is None:
            return None
        checkpoint = await db(Checkpoint.objects.filter(session_id=key, pk=pk).first)()
        if checkpoint is None:
            return None
        return CheckpointInfo(
            str(checkpoint.pk), checkpoint.step, checkpoint.message_count, checkpoint.stream_sequence, checkpoint.state
        )
