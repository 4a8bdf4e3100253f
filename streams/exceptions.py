"""Errors raised by the stream layer.

Every error the project raises derives from :class:`HelixError`, which carries a machine-readable
``code`` and the HTTP ``status_code`` an edge view should answer with::

    HelixError                       EXECUTION_ERROR          500
    ├── ExecutionError               (an agent run could not be started or carried out)
    ├── ValidationError              VALIDATION_ERROR         400
    │   ├── ChunkValidationError     (names the bad field)
    │   └── ResumePositionError      (names the bad header)
    ├── ConfigurationError           CONFIGURATION_ERROR      501
    └── StreamError                  STREAM_ERROR             500
        ├── StreamCreationError      STREAM_CREATION_ERROR    500  the run's stream could not be set up
        ├── StreamNotFoundError      STREAM_NOT_FOUND         404
        ├── StreamFailedError        STREAM_FAILED            410
        ├── StreamClosedError        STREAM_CLOSED            409  write/transition on a closed stream
        ├── WriterClosedError        WRITER_CLOSED            409  write after writer.close()
        ├── SequenceExpiredError     SEQUENCE_EXPIRED         410  position trimmed away: resync
        └── StreamUnavailableError   STREAM_UNAVAILABLE       503  backend unreachable: retry

``StreamUnavailableError`` is the only one a caller should retry as is; the rest describe input or
state that a retry will not change.
"""

from __future__ import annotations

__all__ = [
    "ChunkValidationError",
    "ConfigurationError",
    "ExecutionError",
    "HelixError",
    "ResumePositionError",
    "SequenceExpiredError",
    "StreamClosedError",
    "StreamCreationError",
    "StreamError",
    "StreamFailedError",
    "StreamNotFoundError",
    "StreamUnavailableError",
    "ValidationError",
    "WriterClosedError",
]


class HelixError(Exception):
    """Base of every Helix error: a message plus a stable ``code`` and an HTTP ``status_code``."""

    code: str = "EXECUTION_ERROR"
    status_code: int = 500
    retryable: bool = False
    #: Seconds after which a retry may succeed (sent as ``Retry-After``); ``None``: do not retry as is.
    retry_after: int | None = None

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.__class__.__doc__ or self.code
        super().__init__(self.message)

    def as_dict(self) -> dict[str, str]:
        """The JSON error body edge views send: ``{"error": ..., "code": ...}``."""
        return {"error": self.message, "code": self.code}


class ExecutionError(HelixError):
    """The agent run could not be executed (an unexpected failure; the server log has the details)."""


class ValidationError(HelixError):
    """Input was malformed."""

    code = "VALIDATION_ERROR"
    status_code = 400


class ChunkValidationError(ValidationError):
    """A chunk did not match the protocol; ``field`` names the offending field when known."""

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)


class ResumePositionError(ValidationError):
    """A resume position (``Last-Event-ID`` and friends) was not a usable sequence number."""

    def __init__(self, message: str, header: str | None = None) -> None:
        self.header = header
        super().__init__(message)


class ConfigurationError(HelixError):
    """The project's Helix settings are unusable."""

    code = "CONFIGURATION_ERROR"
    status_code = 501


class StreamError(HelixError):
    """Base for errors about one stream; ``stream_id`` names it."""

    code = "STREAM_ERROR"
    status_code = 500

    def __init__(self, stream_id: str, message: str | None = None) -> None:
        self.stream_id = stream_id
        super().__init__(message or f"{(self.__class__.__doc__ or self.code).rstrip('.')}: {stream_id}")


class StreamCreationError(StreamError):
    """The run's stream could not be created."""

    code = "STREAM_CREATION_ERROR"
    status_code = 500


class StreamNotFoundError(StreamError):
    """Stream not found."""

    code = "STREAM_NOT_FOUND"
    status_code = 404


class StreamFailedError(StreamError):
    """Stream failed."""

    code = "STREAM_FAILED"
    status_code = 410

    def __init__(self, stream_id: str, error: str | None = None) -> None:
        self.error = error
        super().__init__(stream_id, f"Stream failed ({stream_id}): {error}" if error else None)


class StreamClosedError(StreamError):
    """Stream is closed."""

    code = "STREAM_CLOSED"
    status_code = 409

    def __init__(self, stream_id: str, status: str) -> None:
        self.status = status
        super().__init__(stream_id, f"Stream {stream_id} is {status}; it accepts no more chunks")


class StreamSupersededError(StreamError):
    """Someone else holds the stream: a write or transition carried an older fencing epoch, or
    was made for another holder than the one the stream is open for.

    ``epoch`` is the rejected one (``None`` when the caller's is unknown), ``current_epoch`` the
    stream's; ``holder`` is the stream's holder when that was what refused the operation (a
    later run of the session holds it, or the id's stream was deleted and created again).
    Nothing of the rejected operation was stored.
    """

    code = "EXECUTOR_SUPERSEDED"
    status_code = 409

    def __init__(self, stream_id: str, epoch: int | None, current_epoch: int, holder: str | None = None) -> None:
        self.epoch = epoch
        self.current_epoch = current_epoch
        self.holder = holder
        if holder is None:
            message = f"Stream {stream_id} is held by epoch {current_epoch}; epoch {epoch} may not write"
        else:
            message = f"Stream {stream_id} is open for {holder}; a write for another holder is refused"
        super().__init__(stream_id, message)


class WriterClosedError(StreamError):
    """Writer is closed."""

    code = "WRITER_CLOSED"
    status_code = 409


class SequenceExpiredError(StreamError):
    """The requested position was trimmed from the stream; ``earliest`` is the first one kept."""

    code = "SEQUENCE_EXPIRED"
    status_code = 410

    def __init__(self, stream_id: str, requested: int, earliest: int) -> None:
        self.requested = requested
        self.earliest = earliest
        super().__init__(
            stream_id,
            f"Stream {stream_id} no longer holds sequence {requested + 1}; "
            f"the earliest kept is {earliest}: reload a snapshot",
        )


class StreamUnavailableError(StreamError):
    """The stream backend could not be reached; the operation may be retried."""

    code = "STREAM_UNAVAILABLE"
    status_code = 503
    retryable = True
    retry_after = 2
