"""A run's life written to the database: the runtime's :class:`~workers.runtime.persistence.RunRecorder`
on the chat models.

Starting a run records the user's message and a queued run under the session's row lock; claiming
it takes a lease and a fencing epoch; each step commits its messages, state, paused calls and a
checkpoint in one transaction, refused once a newer epoch holds the run; finishing records the
outcome and the session's status. Database work runs in worker threads (:func:`db`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from chat.models import ChatSession, Checkpoint, Message, PendingCall, Run
from chat.session_ids import record_id, session_key
from chat.state.db import db
from streams.conf import helix_settings
from streams.messages import StoredMessage
from workers.exceptions import RunConflictError, RunSupersededError, SessionNotFoundError
from workers.runtime.persistence import (
    PendingCallSpec,
    ResolvedCall,
    RunClaim,
    RunOutcome,
    RunRecorder,
    SessionSnapshot,
)

__all__ = ["DjangoRunRecorder"]


_SESSION_STATUS = {
    "completed": ChatSession.Status.IDLE,
    "interrupted": ChatSession.Status.IDLE,
    "failed": ChatSession.Status.FAILED,
    "paused": ChatSession.Status.PAUSED,
}


class DjangoRunRecorder(RunRecorder):
    """Runs, leases, steps and outcomes in the database."""

    async def start_run(
        self,
        session_id: str,
        agent: str,
        *,
        user_message: StoredMessage | None,
        messages: list[StoredMessage] | None = None,
        state: dict[str, Any] | None = None,
        start_sequence: int,
        message_id: str,
        owner_id: int | None = None,
        caller_owns: bool | None = None,
    ) -> str:
        key = session_key(session_id)
        if key is None:
            raise SessionNotFoundError(f"Invalid session id {session_id!r}")
        try:
            return await db(self._start_run)(
                key, agent, user_message, messages, state, start_sequence, message_id, owner_id, caller_owns
            )
        except IntegrityError:  # another request started a run between our check and insert
            raise RunConflictError(f"Session {session_id} already has a run in flight") from None

    @transaction.atomic
    def _start_run(
        self,
        key: str,
        agent: str,
        user_message: StoredMessage | None,
        messages: list[StoredMessage] | None,
        state: dict[str, Any] | None,
        start_sequence: int,
        message_id: str,
        owner_id: int | None,
        caller_owns: bool | None,
    ) -> str:
        # Whoever creates the row owns it; everyone else is compared with it in this transaction,
        # under its lock: of two callers racing for a new id, the loser finds the winner's owner.
        session, created = ChatSession.objects.select_for_update().get_or_create(
            pk=key, defaults={"agent": agent, "owner_id": owner_id}
        )
        if not created and caller_owns is not None and (not caller_owns or session.owner_id != owner_id):
            raise SessionNotFoundError(f"Session {key} not found")
        if Run.objects.for_session(session.pk).active().exists():
            raise RunConflictError(f"Session {key} already has a run in flight")
        if messages is not None:  # override semantics: the given history replaces the stored one
            Message.objects.filter(session=session).delete()
            Message.objects.bulk_create(
                [Message.from_stored(m, session=session, position=i) for i, m in enumerate(messages)]
            )
        if state is not None:
            session.state = state
        position = Message.objects.filter(session=session).count()
        if user_message is not None:
            Message.from_stored(user_message, session=session, position=position).save()
            position += 1
            if not session.title:
                session.title = user_message.content[:80]
        run = Run.objects.create(
            session=session,
            agent=agent,
            start_sequence=start_sequence,
            message_id=message_id,
            message_offset=position,
            input={"message": user_message.content} if user_message else {},
        )
        session.agent = agent
        session.status = ChatSession.Status.RUNNING
        session.save()
        return str(run.id)

    async def load_session(self, session_id: str) -> SessionSnapshot:
        key = session_key(session_id)

        def read() -> SessionSnapshot | None:
            session = ChatSession.objects.filter(pk=key).first() if key else None
            if session is None:
                return None
            messages = [m.to_stored() for m in Message.objects.for_session(key)]
            return SessionSnapshot(str(session.pk), session.agent, messages, dict(session.state))

        snapshot = await db(read)()
        if snapshot is None:
            raise SessionNotFoundError(f"Session {session_id} not found")
        return snapshot

    # -- leases ------------------------------------------------------------------------------------

    async def claim_run(
        self,
        run_id: str,
        worker: str,
        lease_seconds: float,
        *,
        take_over: bool = True,
        checked_at: datetime | None = None,
    ) -> RunClaim | None:
        return await db(self._claim_run)(run_id, worker, lease_seconds, take_over, checked_at)

    @transaction.atomic
    def _claim_run(
        self,
        run_id: str,
        worker: str,
        lease_seconds: float,
        take_over: bool = True,
        checked_at: datetime | None = None,
    ) -> RunClaim | None:
        key = record_id(run_id)
        run = Run.objects.select_for_update().filter(pk=key).first() if key else None
        if run is None:
            return None
        now = timezone.now()
        if run.status == Run.Status.QUEUED:
            reason = "handed_back" if run.epoch else "start"
        elif run.status == Run.Status.PAUSED:
            calls = PendingCall.objects.filter(run=run)
            if calls.filter(status=PendingCall.Status.PENDING).exists() or not calls.filter(applied=False).exists():
                return None  # still waiting on a person, or nothing to resume with
            reason = "resumed"
        elif run.status == Run.Status.RUNNING and (run.lease_expires_at is None or run.lease_expires_at <= now):
            if not take_over:
                return None  # its worker still marks it alive: the database stalled, not the worker
            if checked_at is not None and run.lease_expires_at is not None and run.lease_expires_at > checked_at:
                return None  # claimed (or renewed) after the caller looked for its mark: not the run it judged
            if run.attempt >= int(helix_settings.MAX_ATTEMPTS):
                return None  # the reaper fails it
            reason = "worker_lost"
            run.attempt += 1
        else:
            return None
        # Epochs grow across the session's runs (they fence the session's one stream); the
        # session row lock serializes their allocation where the database has row locks.
        list(ChatSession.objects.select_for_update().filter(pk=run.session_id).values_list("pk"))
        previous_epoch = run.epoch
        run.epoch = (Run.objects.filter(session_id=run.session_id).aggregate(top=Max("epoch"))["top"] or 0) + 1
        run.status = Run.Status.RUNNING
        run.worker = worker
        run.heartbeat_at = now
        run.lease_expires_at = now + timedelta(seconds=lease_seconds)
        run.started_at = run.started_at or now
        run.save(
            update_fields=["attempt", "epoch", "status", "worker", "heartbeat_at", "lease_expires_at", "started_at"]
        )
        checkpoint = Checkpoint.objects.filter(run=run).order_by("-step").first()
        return RunClaim(
            run_id=str(run.pk),
            session_id=str(run.session_id),
            agent=run.agent,
            message_id=run.message_id,
            epoch=run.epoch,
            attempt=run.attempt,
            step_count=run.step_count,
            start_sequence=run.start_sequence,
            reason=reason,
            checkpoint_id=str(checkpoint.pk) if checkpoint else None,
            checkpoint_sequence=checkpoint.stream_sequence if checkpoint else None,
            waiting=PendingCall.objects.filter(run=run, status=PendingCall.Status.PENDING).exists(),
            previous_epoch=previous_epoch,
        )

    async def renew_leases(self, worker: str, run_ids: list[str], lease_seconds: float) -> set[str]:
        def renew() -> set[str]:
            now = timezone.now()
            mine = Run.objects.filter(pk__in=run_ids, worker=worker)
            mine.filter(status__in=[Run.Status.RUNNING, Run.Status.INTERRUPTED]).update(
                heartbeat_at=now, lease_expires_at=now + timedelta(seconds=lease_seconds)
            )
            return {str(pk) for pk in mine.values_list("pk", flat=True)}

        return await db(renew)()

    async def release_run(self, run_id: str, epoch: int) -> bool:
        query = Run.objects.filter(pk=run_id, epoch=epoch, status=Run.Status.RUNNING)
        return bool(await db(query.update)(status=Run.Status.QUEUED, worker="", lease_expires_at=None))

    @staticmethod
    def _fenced_run(run_id: str, epoch: int | None) -> Run:
        run = Run.objects.select_for_update().select_related("session").get(pk=run_id)
        if epoch is not None and run.epoch != epoch:
            raise RunSupersededError(str(run.session_id), run_id, epoch, run.epoch)
        return run

    # -- steps -------------------------------------------------------------------------------------

    async def commit_step(
        self,
        run_id: str,
        step: int,
        messages: list[StoredMessage],
        state: dict[str, Any],
        stream_sequence: int,
        *,
        epoch: int | None = None,
        pending: list[PendingCallSpec] | None = None,
        applied: list[str] | None = None,
    ) -> tuple[str, int]:
        return await db(self._commit_step)(run_id, step, messages, state, stream_sequence, epoch, pending, applied)

    @transaction.atomic
    def _commit_step(
        self,
        run_id: str,
        step: int,
        messages: list[StoredMessage],
        state: dict[str, Any],
        stream_sequence: int,
        epoch: int | None,
        pending: list[PendingCallSpec] | None = None,
        applied: list[str] | None = None,
    ) -> tuple[str, int]:
        run = self._fenced_run(run_id, epoch)
        if applied:
            PendingCall.objects.filter(run=run, tool_call_id__in=applied).update(applied=True)
        if pending:
            expires = timezone.now() + timedelta(seconds=float(helix_settings.APPROVAL_TTL_SECONDS))
            PendingCall.objects.bulk_create(
                PendingCall(
                    id=spec.approval_id,
                    run=run,
                    session=run.session,
                    owner_id=run.session.owner_id,
                    kind=spec.kind,
                    tool_call_id=spec.tool_call_id,
                    tool_name=spec.tool_name,
                    arguments=spec.arguments,
                    expires_at=expires,
                )
                for spec in pending
            )
        session = run.session
        position = Message.objects.filter(session=session).count()
        Message.objects.bulk_create(
            [Message.from_stored(m, session=session, run=run, position=position + i) for i, m in enumerate(messages)]
        )
        count = position + len(messages)
        session.state = state
        session.save(update_fields=["state", "updated_at"])
        run.step_count = step
        run.save(update_fields=["step_count"])
        checkpoint = Checkpoint.objects.create(
            run=run, session=session, step=step, state=state, message_count=count, stream_sequence=stream_sequence
        )
        return str(checkpoint.id), count

    async def resolved_calls(self, run_id: str) -> list[ResolvedCall]:
        def read() -> list[ResolvedCall]:
            calls = PendingCall.objects.filter(run_id=run_id, applied=False).exclude(status=PendingCall.Status.PENDING)
            return [
                ResolvedCall(c.tool_call_id, c.tool_name, c.arguments, c.kind, c.status, c.output, c.error, c.reason)
                for c in calls.order_by("created_at")
            ]

        return await db(read)()

    async def finish_run(self, run_id: str, outcome: RunOutcome, *, epoch: int | None = None) -> None:
        await db(self._finish_run)(run_id, outcome, epoch)

    @transaction.atomic
    def _finish_run(self, run_id: str, outcome: RunOutcome, epoch: int | None = None) -> None:
        run = self._fenced_run(run_id, epoch)
        run.lease_expires_at = None
        run.status = outcome.status
        run.output = outcome.output
        run.error_code = outcome.error_code
        run.error_message = outcome.error_message
        run.usage = outcome.usage
        if outcome.status != Run.Status.PAUSED:
            run.finished_at = timezone.now()
        run.save()
        session = run.session
        session.status = _SESSION_STATUS.get(outcome.status, ChatSession.Status.IDLE)
        session.save(update_fields=["status", "updated_at"])

    async def run_status(self, run_id: str) -> str:
        status = await db(Run.objects.filter(pk=run_id).values_list("status", flat=True).first)()
        return str(status) if status else "failed"

    async def stopped_runs(self, run_ids: list[str]) -> set[str]:
        query = Run.objects.filter(pk__in=run_ids, status=Run.Status.INTERRUPTED).values_list("pk", flat=True)
        return {str(pk) for pk in await db(lambda: list(query))()}

    async def request_stop(self, session_id: str) -> bool:
        """Mark the session's active run interrupted; its runtime stops at the next safe point."""
        key = session_key(session_id)
        if key is None:
            return False
        query = Run.objects.for_session(key).filter(status__in=["queued", "running"])
        updated = await db(query.update)(status=Run.Status.INTERRUPTED, finished_at=timezone.now())
        return updated > 0
