"""Every error the workers package raises, and the codes a failed run is recorded with.

Like every project error they derive from :class:`~streams.exceptions.HelixError`::

    HelixError                        code                   status
    ├── RunError                      a RunErrorCode         500   the run fails with this code
    │   ├── LLMError                  provider_*, …          502   the model call failed
    │   └── StatePatchError           state_patch_failed     500   a state patch does not apply
    ├── UnknownAgentError             UNKNOWN_AGENT          400
    ├── RunConflictError              RUN_CONFLICT           409   the session has a run in flight
    ├── SessionNotFoundError          SESSION_NOT_FOUND      404
    ├── DatabaseUnavailableError      DATABASE_UNAVAILABLE   503   down, or stalled past its timeouts
    └── StreamError
        └── StreamSupersededError     EXECUTOR_SUPERSEDED    409
            └── RunSupersededError    (inherited)                  the database refused the write

HTTP-facing codes are UPPER_SNAKE. A failed run's code (the ``code`` of its ``error`` chunk and
the run's recorded ``error_code``) is lower_snake, one of :class:`RunErrorCode`; a
:class:`RunError` carries it with ``recoverable`` (whether retrying may help).
:func:`as_run_error` says which code a run that raised something fails with.
:class:`StopRequested` is no error: it unwinds a run its user stopped, to a safe point.
"""

from __future__ import annotations

from enum import StrEnum

from streams.exceptions import HelixError, StreamError, StreamSupersededError

__all__ = [
    "DatabaseUnavailableError",
    "ExecutorUnavailableError",
    "LLMError",
    "RunConflictError",
    "RunError",
    "RunErrorCode",
    "RunSupersededError",
    "SessionNotFoundError",
    "StatePatchError",
    "StopRequested",
    "UnknownAgentError",
    "as_run_error",
]


class RunErrorCode(StrEnum):
    """Why a run failed: the ``code`` of its ``error`` chunk and its recorded ``error_code``."""

    # The runtime raised something unexpected (a bug), or the run's agent modules failed to import.
    INTERNAL_ERROR = "internal_error"
    # The run names an agent this worker has not registered (removed or renamed since it started).
    UNKNOWN_AGENT = "unknown_agent"
    # The agent was still calling tools after its ``max_steps`` steps.
    MAX_STEPS_EXCEEDED = "max_steps_exceeded"
    # The final answer does not validate against the agent's ``output_schema``.
    OUTPUT_VALIDATION_FAILED = "output_validation_failed"
    # A sub-agent called a client tool or an approval-gated tool: only a run's own agent can pause.
    UNSUPPORTED_PAUSE = "unsupported_pause"
    # A sub-agent ended without completing and without a code of its own (it was interrupted).
    SUBAGENT_FAILED = "subagent_failed"
    # A state patch did not apply to the agent's state (outside a tool, which records it instead).
    STATE_PATCH_FAILED = "state_patch_failed"
    # The model provider answered 429 on every retry.
    PROVIDER_RATE_LIMITED = "provider_rate_limited"
    # The model provider answered 5xx on every retry.
    PROVIDER_OVERLOADED = "provider_overloaded"
    # The model provider refused the credentials (401, 403).
    PROVIDER_AUTH = "provider_auth"
    # The model provider rejected the request (another 4xx).
    PROVIDER_BAD_REQUEST = "provider_bad_request"
    # The model provider could not be reached, or timed out, on every retry.
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    # The model call failed some other way (the default of an :class:`LLMError`).
    PROVIDER_ERROR = "provider_error"
    # The model's response cannot be used: the scripted model called a tool the agent lacks.
    INVALID_RESPONSE = "invalid_response"
    # The Celery task ran past ``HELIX["RUN_TIME_LIMIT_SECONDS"]``.
    TIME_LIMIT_EXCEEDED = "time_limit_exceeded"
    # The run's worker went silent ``HELIX["MAX_ATTEMPTS"]`` times: the reaper failed it.
    WORKER_LOST = "worker_lost"
    # The run could not be handed to a worker: the broker was unreachable when it was sent.
    ENQUEUE_FAILED = "enqueue_failed"
    # No worker picked the run up within ``HELIX["RUN_TIME_LIMIT_SECONDS"]``: the reaper failed it.
    NOT_STARTED = "not_started"
    # The database did not answer (down, or stalled past its timeouts) when a step was saved.
    DATABASE_UNAVAILABLE = "database_unavailable"


class RunError(HelixError):
    """A run-level failure: the run ends with an ``error`` chunk carrying ``code`` and ``recoverable``."""

    code: RunErrorCode = RunErrorCode.INTERNAL_ERROR
    recoverable: bool = False

    def __init__(self, message: str, code: RunErrorCode | None = None, recoverable: bool | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = RunErrorCode(code)
        if recoverable is not None:
            self.recoverable = recoverable


class LLMError(RunError):
    """The model call failed; ``code`` classifies it, ``recoverable`` says if a retry may help."""

    code = RunErrorCode.PROVIDER_ERROR
    status_code = 502


class StatePatchError(RunError):
    """A state patch does not apply to the current state."""

    code = RunErrorCode.STATE_PATCH_FAILED


class StopRequested(Exception):
    """The run's user asked it to stop: raised at the next safe point, never outside the runtime."""


class UnknownAgentError(HelixError):
    """No agent is registered under that name."""

    code = "UNKNOWN_AGENT"
    status_code = 400


class RunConflictError(HelixError):
    """The session already has a run in flight."""

    code = "RUN_CONFLICT"
    status_code = 409


class SessionNotFoundError(HelixError):
    """No such session."""

    code = "SESSION_NOT_FOUND"
    status_code = 404


class RunSupersededError(StreamSupersededError):
    """A newer attempt claimed the run: the database refused this attempt's write, and it must stop.

    ``epoch`` is the refused attempt's, ``current_epoch`` the run's; the run's session stream is
    fenced by the same epochs, so this is the stream's supersession seen from the database.
    """

    def __init__(self, session_id: str, run_id: str, epoch: int | None, current_epoch: int) -> None:
        self.run_id = run_id
        self.epoch = epoch
        self.current_epoch = current_epoch
        StreamError.__init__(self, session_id, f"Run {run_id} is held by epoch {current_epoch}, not {epoch}")


def as_run_error(exc: Exception) -> RunError:
    """What a run that raised ``exc`` fails with: a :class:`RunError` as it is, an unknown agent
    as ``unknown_agent``, anything else (a bug) as ``internal_error`` naming the exception type."""
    if isinstance(exc, RunError):
        return exc
    if isinstance(exc, UnknownAgentError):
        return RunError(exc.message, RunErrorCode.UNKNOWN_AGENT)
    if isinstance(exc, DatabaseUnavailableError):
        return RunError(DATABASE_UNAVAILABLE_TEXT, RunErrorCode.DATABASE_UNAVAILABLE, recoverable=True)
    return RunError(f"{type(exc).__name__}: {exc}", RunErrorCode.INTERNAL_ERROR)


#: What the user of a run the database failed reads (the driver's text goes to the logs only).
DATABASE_UNAVAILABLE_TEXT = (
    "The service's database stopped answering, so this answer stopped after its last saved step. "
    "Send your message again in a moment."
)


class DatabaseUnavailableError(HelixError):
    """The database did not answer: it is down, or stalled past its timeouts. Nothing was
    changed by the call that failed; retry in a moment. The driver's error is the cause
    (``__cause__``) and goes to the logs, never to a client."""

    code = "DATABASE_UNAVAILABLE"
    status_code = 503
    retryable = True
    retry_after = 5

    def __init__(self, message: str = "The database is not answering; retry in a moment") -> None:
        super().__init__(message)


class ExecutorUnavailableError(HelixError):
    """The run was recorded but could not be handed to a worker (the broker is unreachable); it
    was failed, so nothing waits on it. Retry in a moment."""

    code = "EXECUTOR_UNAVAILABLE"
    status_code = 503
    retryable = True
    retry_after = 2
