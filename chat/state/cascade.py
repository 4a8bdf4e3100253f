"""What a deleted session takes with it outside the database: its stream.

However a session is deleted (the API's DELETE, the admin, ``cleanup_helix``, a host site's own
code or a cascade from its user), its stream is deleted from the stream store once the deletion
commits. Its transcript does not outlive it, and readers still tailing it end at once with a typed
error (``STREAM_NOT_FOUND``) instead of waiting on a stream nobody writes any more; a worker still
running the session's run finds its stream gone at its next write and its lease gone at its next
beat, and stops.

A deletion also locks the session's runs and then its row (the order workers lock them in)
before it removes anything: a worker committing a step of that session meanwhile then waits, and
fails once the session is gone, instead of adding rows the deletion has already cleared and
failing the deletion on its foreign keys. A run started between Django's collecting what to
delete and that lock is not in the deletion; :func:`delete_session` (the API's DELETE) tries
again then.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from django.db import IntegrityError, router, transaction
from django.db.models.signals import post_delete, pre_delete

from chat.models import ChatSession, Run
from chat.session_ids import session_key
from streams.backends import get_stream_manager
from streams.exceptions import HelixError

logger = logging.getLogger(__name__)


def delete_stream(session_id: str) -> None:
    """Delete the stream of ``session_id``; a store that cannot be reached is logged (the stream
    then expires with its retention)."""
    try:
        async_to_sync(get_stream_manager().delete_stream)(session_id)
    except HelixError:
        logger.warning("could not delete the stream of deleted session %s (it expires)", session_id, exc_info=True)


def _lock_session(sender: type[ChatSession], instance: ChatSession, **kwargs: Any) -> None:
    # pre_delete runs in the deletion's transaction, before any of its DELETEs. On PostgreSQL a
    # step's rows are checked against their session when the step commits (deferred foreign
    # keys), and that check waits for this lock; databases without row locks ignore it.
    using = kwargs.get("using") or router.db_for_write(sender)
    runs = Run._base_manager.using(using).select_for_update().filter(session_id=instance.pk).order_by("pk")
    list(runs.values_list("pk"))
    list(sender._base_manager.using(using).select_for_update().filter(pk=instance.pk).values_list("pk"))


def delete_session(session_id: str, attempts: int = 3) -> bool:
    """Delete the session ``session_id`` and everything it holds; ``False`` if there was none.
    A run started while the deletion was under way makes it fail on that run's foreign key, and
    it is tried again (on a database thread)."""
    key = session_key(session_id)
    if key is None:
        return False
    for attempt in range(1, attempts + 1):
        try:
            with transaction.atomic():
                return ChatSession.objects.filter(pk=key).delete()[0] > 0
        except IntegrityError:
            if attempt == attempts:
                raise
            logger.info("session %s gained a run while it was deleted; deleting again", session_id)
    return False


def _session_deleted(sender: type[ChatSession], instance: ChatSession, **kwargs: Any) -> None:
    using = kwargs.get("using") or router.db_for_write(sender)
    transaction.on_commit(partial(delete_stream, str(instance.pk)), using=using)


def connect() -> None:
    pre_delete.connect(_lock_session, sender=ChatSession, dispatch_uid="helix-session-lock")
    post_delete.connect(_session_deleted, sender=ChatSession, dispatch_uid="helix-session-stream")
