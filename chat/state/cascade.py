"""What a deleted session takes with it outside the database: its stream.

However a session is deleted (the API's DELETE, the admin, ``cleanup_helix``, a host site's own
code or a cascade from its user), its stream is deleted from the stream store once the deletion
commits. Its transcript does not outlive it, and readers still tailing it end at once with a typed
error (``STREAM_NOT_FOUND``) instead of waiting on a stream nobody writes any more; a worker still
running the session's run finds its stream gone at its next write and its lease gone at its next
beat, and stops.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from django.db import router, transaction
from django.db.models.signals import post_delete

from chat.models import ChatSession
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


def _session_deleted(sender: type[ChatSession], instance: ChatSession, **kwargs: Any) -> None:
    using = kwargs.get("using") or router.db_for_write(sender)
    transaction.on_commit(partial(delete_stream, str(instance.pk)), using=using)


def connect() -> None:
    post_delete.connect(_session_deleted, sender=ChatSession, dispatch_uid="helix-session-stream")
