"""Query sets for the chat models: the queries the store, views and admin share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import models

if TYPE_CHECKING:
    from chat.models import ChatSession, Checkpoint, Message, Run  # noqa: F401 (named in string annotations)

__all__ = ["CheckpointQuerySet", "MessageQuerySet", "RunQuerySet", "SessionQuerySet"]


class SessionQuerySet(models.QuerySet["ChatSession"]):
    def owned_by(self, user: Any) -> SessionQuerySet:
        """Sessions of ``user`` (anonymous sessions for an anonymous user)."""
        if user is None or not getattr(user, "is_authenticated", False):
            return self.filter(owner__isnull=True)
        return self.filter(owner=user)


class RunQuerySet(models.QuerySet["Run"]):
    def active(self) -> RunQuerySet:
        return self.filter(status__in=["queued", "running", "paused"])

    def for_session(self, session_id: Any) -> RunQuerySet:
        return self.filter(session_id=session_id)

    def latest_first(self) -> RunQuerySet:
        return self.order_by("-created_at")


class MessageQuerySet(models.QuerySet["Message"]):
    def for_session(self, session_id: Any) -> MessageQuerySet:
        return self.filter(session_id=session_id).order_by("position")


class CheckpointQuerySet(models.QuerySet["Checkpoint"]):
    def latest_for_run(self, run_id: Any) -> Checkpoint | None:
        return self.filter(run_id=run_id).order_by("-step").first()
