"""Session ids: what a client may choose, the one spelling every store keys by, and new ones.

A session id is any URL-safe string of 1 to 128 characters — letters, digits, ``-``, ``_``, ``.``
and ``:`` — that is not made of dots alone and holds no ``..``: the AI SDK's chat ids, the seeds'
``session-123`` and UUIDs all qualify. A UUID has many spellings (``uuidString`` on Apple platforms
writes it in capitals; some clients drop the hyphens), so an id that parses as one is keyed by its
canonical form, lower case with hyphens, in the database, in Redis and in every answer; any other
id is kept exactly as written. Runs, checkpoints and pending calls are keyed by UUIDs
(:func:`record_id`).
"""

from __future__ import annotations

import re
import uuid
from typing import Any, TypeGuard

from streams.exceptions import ValidationError

__all__ = [
    "MAX_SESSION_ID_LENGTH",
    "body_session_id",
    "canonical_session_id",
    "is_session_id",
    "new_session_id",
    "record_id",
    "session_key",
]

MAX_SESSION_ID_LENGTH = 128
_SHAPE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_UUID_SPELLINGS = re.compile(r"[0-9A-Fa-f]{32}|[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}")
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")


def is_session_id(value: object) -> TypeGuard[str]:
    """True if ``value`` is a well-formed session id (in any spelling)."""
    return (
        isinstance(value, str) and _SHAPE.fullmatch(value) is not None and ".." not in value and value.strip(".") != ""
    )


def canonical_session_id(value: object, field: str = "session id") -> str:
    """The canonical spelling of the session id ``value``; raises a ``ValidationError`` naming
    ``field`` when it is not a session id."""
    if type(value) is str and _CANONICAL_UUID.fullmatch(value):  # most ids, once the edge has seen them
        return value
    if not is_session_id(value):
        shown = repr(value) if isinstance(value, str) and len(value) <= 40 else "the value given"
        raise ValidationError(
            f"{field} must be 1 to {MAX_SESSION_ID_LENGTH} letters, digits, '-', '_', '.' or ':' "
            f"(not dots alone, no '..'); got {shown}"
        )
    return str(uuid.UUID(value)) if _UUID_SPELLINGS.fullmatch(value) else value


def new_session_id() -> str:
    """A fresh session id, for a chat request that names none."""
    return str(uuid.uuid4())


def session_key(value: str) -> str | None:
    """``value`` if it is a session id, else ``None``: stores look up only ids the edge canonicalised."""
    return value if is_session_id(value) else None


def body_session_id(body: Any) -> str | None:
    """The session a chat body names, canonical: the AI SDK's chat ``id`` or the seeds'
    ``sessionId``; ``None`` when it names none."""
    if isinstance(body, dict):
        for field in ("id", "sessionId"):
            if body.get(field) is not None:
                return canonical_session_id(body[field], field)
    return None


def record_id(value: object) -> uuid.UUID | None:
    """The UUID a run, checkpoint or pending call id names, or ``None`` when it names none."""
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        return None
