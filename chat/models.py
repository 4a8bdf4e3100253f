"""Sessions, runs, messages and checkpoints: the state store of Helix chat."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models

from chat.ai_sdk.state import ACTIVE_RUN_STATUSES
from chat.session_ids import MAX_SESSION_ID_LENGTH, new_session_id
from streams.messages import StoredMessage, ToolCall

__all__ = ["ChatSession", "Checkpoint", "Message", "PendingCall", "Run"]


class RunQuerySet(models.QuerySet["Run"]):
    def active(self) -> RunQuerySet:
        """Runs that hold their session: queued, running or paused."""
        return self.filter(status__in=Run.ACTIVE)

    def for_session(self, session_id: Any) -> RunQuerySet:
        return self.filter(session_id=session_id)

    def latest_first(self) -> RunQuerySet:
        return self.order_by("-created_at")


class MessageQuerySet(models.QuerySet["Message"]):
    def for_session(self, session_id: Any) -> MessageQuerySet:
        """The session's messages in conversation order."""
        return self.filter(session_id=session_id).order_by("position")


class ChatSession(models.Model):
    """A conversation with an agent; its id is also the id of its stream."""

    class Status(models.TextChoices):
        IDLE = "idle", "idle"
        RUNNING = "running", "running"
        PAUSED = "paused", "paused"
        FAILED = "failed", "failed"

    id = models.CharField(
        primary_key=True,
        max_length=MAX_SESSION_ID_LENGTH,
        default=new_session_id,
        editable=False,
        help_text="Chosen by the client or made by the server; see chat.session_ids.",
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="helix_sessions"
    )
    agent = models.CharField(max_length=100, db_index=True)
    title = models.CharField(max_length=200, blank=True)
    state = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IDLE, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.title or f"{self.agent} session {str(self.id)[:8]}"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    PAUSED = "paused", "paused"
    COMPLETED = "completed", "completed"
    FAILED = "failed", "failed"
    INTERRUPTED = "interrupted", "interrupted"


ACTIVE_RUN = [status for status in RunStatus if status in ACTIVE_RUN_STATUSES]


class Run(models.Model):
    """One execution of the agent in a session: from a user message to an answer (or an error)."""

    Status = RunStatus
    #: Statuses of a run that holds its session (at most one per session).
    ACTIVE = ACTIVE_RUN

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Indexed by the session with its latest run first (Meta.indexes), which serves lookups by
    # the session alone too.
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="runs", db_index=False)
    agent = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    start_sequence = models.BigIntegerField(default=0, help_text="Stream sequence before the run's first chunk.")
    step_count = models.PositiveIntegerField(default=0)
    message_id = models.CharField(max_length=100, blank=True, help_text="UI message id of the response.")
    message_offset = models.PositiveIntegerField(default=0, help_text="Session messages before the run's output.")
    input = models.JSONField(default=dict, blank=True)
    output = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    attempt = models.PositiveIntegerField(default=1)
    epoch = models.PositiveIntegerField(default=0, help_text="Fencing epoch of the current attempt.")
    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    usage = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # A session's latest run (each resume and each chat POST reads it) in one seek,
            # however many runs the session has had.
            models.Index(fields=["session", "-created_at"], name="helix_chat_run_latest"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["session"],
                condition=models.Q(status__in=ACTIVE_RUN),
                name="helix_chat_one_active_run_per_session",
            )
        ]

    def __str__(self) -> str:
        return f"run {str(self.id)[:8]} ({self.status})"

    @property
    def duration(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class Message(models.Model):
    """One stored message (``streams.messages.StoredMessage``), in session order."""

    class Role(models.TextChoices):
        USER = "user", "user"
        ASSISTANT = "assistant", "assistant"
        SYSTEM = "system", "system"
        TOOL = "tool", "tool"

    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="messages")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages")
    position = models.PositiveIntegerField()
    message_id = models.CharField(max_length=100, blank=True)
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)
    reasoning = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    tool_call_id = models.CharField(max_length=100, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MessageQuerySet.as_manager()

    class Meta:
        ordering = ["session", "position"]
        constraints = [
            models.UniqueConstraint(fields=["session", "position"], name="helix_chat_message_position_per_session")
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.position}"

    def to_stored(self) -> StoredMessage:
        return StoredMessage(
            role=self.role,  # type: ignore[arg-type]
            content=self.content,
            id=self.message_id or None,
            reasoning=self.reasoning or None,
            tool_calls=[ToolCall(id=c["id"], name=c["name"], arguments=c.get("arguments")) for c in self.tool_calls],
            tool_call_id=self.tool_call_id or None,
            metadata=self.metadata,
        )

    @classmethod
    def from_stored(cls, message: StoredMessage, **fields: Any) -> Message:
        return cls(
            role=message.role,
            content=message.content,
            message_id=message.id or "",
            reasoning=message.reasoning or "",
            tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls],
            tool_call_id=message.tool_call_id or "",
            metadata=dict(message.metadata),
            **fields,
        )


class Checkpoint(models.Model):
    """The state of a run after a committed step: where a new attempt restarts."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveIntegerField()
    state = models.JSONField(default=dict, blank=True)
    message_count = models.PositiveIntegerField()
    stream_sequence = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step"], name="helix_chat_one_checkpoint_per_step"),
        ]

    def __str__(self) -> str:
        return f"checkpoint step {self.step} of {self.run}"


class PendingCall(models.Model):
    """A tool call a run waits on: an approval gate's decision, or a client tool's result.

    Its id is the approval id the client answers with. Only the session's owner (or staff in the
    admin) may decide it, once, before ``expires_at``.
    """

    class Kind(models.TextChoices):
        APPROVAL = "approval", "approval"
        CLIENT_TOOL = "client_tool", "client tool"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        APPROVED = "approved", "approved"
        DENIED = "denied", "denied"
        ANSWERED = "answered", "answered"
        EXPIRED = "expired", "expired"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="pending_calls")
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="pending_calls")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    tool_call_id = models.CharField(max_length=100)
    tool_name = models.CharField(max_length=100)
    arguments = models.JSONField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True, help_text="A client tool's result.")
    error = models.TextField(blank=True, help_text="A client tool's error.")
    reason = models.TextField(blank=True, help_text="Why it was approved or denied.")
    applied = models.BooleanField(default=False, help_text="The run has taken the decision into a committed step.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="helix_chat_one_pending_call_per_tool_call")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.tool_name} ({self.status})"
