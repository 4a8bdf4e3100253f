"""Double texting: what a chat POST does while its session already has a run in flight.

The choices are LangGraph's (``HELIX["DOUBLE_TEXTING"]``):

- ``reject``: ``409 RUN_CONFLICT``.
- ``reattach`` (the default): a POST that carries the JS helpers' resume headers
  (``X-Resume-From-Sequence``, ``X-Existing-Message-Id``) streams the run in flight from that
  position — a tab that reloaded, or a second tab, joins the answer instead of failing. Without
  them it is rejected.
- ``interrupt``: the run in flight is stopped at its next safe point (what it streamed is kept);
  once its stream has ended, this message starts.
- ``enqueue``: this message starts when the run in flight ends.

A run paused on a person is neither stopped nor waited for: the POST answers 409 (answer or deny
the calls it waits on first).

Waiting (``interrupt``, ``enqueue``) lasts at most ``HELIX["DOUBLE_TEXTING_WAIT_SECONDS"]``; then
the POST is rejected as with ``reject``. Waits poll the stores; no thread is held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from chat.ai_sdk.messages import PARTIAL_SUFFIX
from chat.ai_sdk.state import RunInfo, StateStore
from streams.backends.base import StreamManager
from streams.exceptions import ConfigurationError
from streams.sse import header_value
from workers.exceptions import RunConflictError

__all__ = [
    "POLICIES",
    "DoubleTexting",
    "Policy",
    "existing_message_id",
    "reattach_position_given",
    "wait_until_idle",
]

Policy = Literal["reject", "reattach", "interrupt", "enqueue"]
POLICIES: tuple[Policy, ...] = ("reject", "reattach", "interrupt", "enqueue")
EXISTING_MESSAGE_HEADER = "X-Existing-Message-Id"
_POLL_SECONDS = 0.05


def existing_message_id(headers: Any) -> str | None:
    """The message the client shows for the run in flight (``X-Existing-Message-Id``), if sent."""
    value = header_value(headers, EXISTING_MESSAGE_HEADER)
    return value if isinstance(value, str) and value else None


def reattach_position_given(headers: Any) -> bool:
    """Whether a POST carries the helpers' reattach headers."""
    return any(header_value(headers, name) is not None for name in ("X-Resume-From-Sequence", EXISTING_MESSAGE_HEADER))


async def wait_until_idle(store: StateStore, streams: StreamManager, session_id: str, seconds: float) -> bool:
    """Wait until the session has no run in flight and its stream no active writer; ``False`` when
    ``seconds`` ran out first."""
    deadline = time.monotonic() + seconds
    while True:
        run = await store.get_current_run(session_id)
        info = await streams.get_stream_info(session_id)
        if (run is None or not run.is_active) and (info is None or info.status != "active"):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_POLL_SECONDS)


class DoubleTexting:
    """Applies one policy; ``stop`` asks a session's run to stop (``interrupt`` needs it)."""

    def __init__(
        self, policy: str, *, wait_seconds: float = 30.0, stop: Callable[[str], Awaitable[bool]] | None = None
    ) -> None:
        if policy not in POLICIES:
            raise ConfigurationError(f"DOUBLE_TEXTING must be one of {', '.join(POLICIES)}, not {policy!r}")
        if policy == "interrupt" and stop is None:
            raise ConfigurationError("The interrupt policy needs a way to stop runs")
        self.policy: Policy = policy
        self.wait_seconds = wait_seconds
        self.stop = stop

    def reattach_to(self, run: RunInfo | None, headers: Mapping[str, Any]) -> bool:
        """Whether a POST that met ``run`` in flight should stream it instead. A POST naming
        another reply (``X-Existing-Message-Id``) than the one in flight is not reattached."""
        if self.policy != "reattach" or run is None or not run.is_active or not reattach_position_given(headers):
            return False
        existing = existing_message_id(headers)
        return existing is None or existing.removesuffix(PARTIAL_SUFFIX) == run.message_id

    async def make_room(
        self,
        store: StateStore,
        streams: StreamManager,
        session_id: str,
        run: RunInfo | None,
        conflict: RunConflictError,
    ) -> None:
        """For ``interrupt`` and ``enqueue``: clear the way for a new run (stop the one in flight,
        or wait for it to end). Raises ``conflict`` when the policy does not wait, the run waits
        on a person, or the wait runs out."""
        if self.policy not in ("interrupt", "enqueue") or run is None:
            raise conflict
        if run.status == "paused":  # answer (or deny) the calls it waits on first
            raise RunConflictError(f"The run of session {session_id} waits on a person's answer")
        if self.policy == "interrupt":
            assert self.stop is not None
            await self.stop(session_id)
        if not await wait_until_idle(store, streams, session_id, self.wait_seconds):
            raise conflict
