"""Errors of the chat API: who may call it, and what it refuses. Each renders as
``{"error": ..., "code": ...}`` with its HTTP status (see :mod:`chat.http.pipeline`)."""

from __future__ import annotations

from streams.exceptions import HelixError, ValidationError
from workers.exceptions import SessionNotFoundError  # the store raises it too; answered 404 here

__all__ = [
    "AuthenticationFailedError",
    "CheckpointNotFoundError",
    "CsrfFailedError",
    "DecisionExpiredError",
    "DecisionRejectedError",
    "MethodNotAllowedError",
    "NotAuthenticatedError",
    "OverrideNotAllowedError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "SessionNotFoundError",
    "TooManyStreamsError",
]


class NotAuthenticatedError(HelixError):
    """Authentication required."""

    code = "NOT_AUTHENTICATED"
    status_code = 401


class AuthenticationFailedError(HelixError):
    """The credentials were refused."""

    code = "AUTHENTICATION_FAILED"
    status_code = 401


class PermissionDeniedError(HelixError):
    """The site's permission classes refused the request."""

    code = "PERMISSION_DENIED"
    status_code = 403


class CsrfFailedError(HelixError):
    """A browser request authenticated by its cookie came without a valid CSRF token."""

    code = "CSRF_FAILED"
    status_code = 403


class MethodNotAllowedError(HelixError):
    """The endpoint does not take this HTTP method."""

    code = "METHOD_NOT_ALLOWED"
    status_code = 405


class PayloadTooLargeError(HelixError):
    """The request body is too large."""

    code = "PAYLOAD_TOO_LARGE"
    status_code = 413


class RateLimitedError(HelixError):
    """Too many requests."""

    code = "RATE_LIMITED"
    status_code = 429

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message or f"Too many chat requests; retry in {retry_after} s")


class TooManyStreamsError(HelixError):
    """The caller already has ``HELIX["MAX_STREAMS_PER_CALLER"]`` streams open on this web process."""

    code = "TOO_MANY_STREAMS"
    status_code = 429
    retryable = True
    retry_after = 5


class DecisionRejectedError(HelixError):
    """The answer does not fit a pending call of this run (unknown, already decided, or wrong kind)."""

    code = "DECISION_REJECTED"
    status_code = 409


class DecisionExpiredError(HelixError):
    """The pending call expired before the answer came."""

    code = "DECISION_EXPIRED"
    status_code = 410


class OverrideNotAllowedError(ValidationError):
    """The request replaces the session's history or state (``messages`` / ``state``), which only
    callers passing ``HELIX["OVERRIDE_PERMISSION_CLASSES"]`` may do; ``field`` names it."""

    code = "OVERRIDE_NOT_ALLOWED"

    def __init__(self, field: str) -> None:
        self.field = field
        super().__init__(
            f"{field} replaces what the server stored for this session; this caller may not send it "
            "(the server's history and state are authoritative)"
        )


class CheckpointNotFoundError(HelixError):
    """The session has no checkpoint of that id."""

    code = "CHECKPOINT_NOT_FOUND"
    status_code = 404
