"""Sub-agents: an agent used as a tool of another, run in the same stream under its own agent id.

The child runs a loop of its own (its history in memory: the parent's step commits its result),
its chunks tagged ``<parent agent id>/<tool call id>`` and framed by ``subagent_start`` and
``subagent_end``. Its token usage counts toward the parent's. A child that does not complete
fails the parent's tool call with the child's error code.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import BaseModel

from streams.messages import StoredMessage
from streams.protocol import SubAgentEnd, SubAgentStart
from workers.exceptions import RunError, RunErrorCode
from workers.runtime.agents import Agent
from workers.runtime.persistence import RunOutcome
from workers.runtime.writer import RunWriter

__all__ = ["ChildRun", "ParentRun", "run_subagent"]


class ChildRun(Protocol):
    """A sub-agent's loop, ready to run."""

    async def run(self, *, messages: list[StoredMessage], state: dict[str, Any]) -> RunOutcome: ...


class ParentRun(Protocol):
    """The loop whose tool call starts a sub-agent (a :class:`~workers.runtime.steps.RunLoop`)."""

    agent_id: str
    step: int
    usage: dict[str, int]

    @property
    def writer(self) -> RunWriter: ...

    def child(self, agent: Agent, agent_id: str) -> ChildRun:
        """A loop of ``agent`` under this one, writing as ``agent_id``."""
        ...


async def run_subagent(parent: ParentRun, agent: Agent, call_id: str, task: BaseModel) -> Any:
    """Run ``agent`` for ``parent``'s tool call ``call_id`` on ``task``; return its output (or final text)."""
    sub_session_id = f"{parent.agent_id}/{call_id}"
    frame = {"step": parent.step, "sub_agent_type": agent.name, "sub_session_id": sub_session_id, "call_id": call_id}
    await parent.writer.emit(SubAgentStart, **frame)
    await parent.writer.flush()  # the start lands before the child's first chunk
    prompt = getattr(task, "task", None) or json.dumps(task.model_dump(mode="json"))
    child = parent.child(agent, sub_session_id)
    outcome = await child.run(messages=[StoredMessage(role="user", content=prompt)], state={})
    for key, value in outcome.usage.items():
        parent.usage[key] = parent.usage.get(key, 0) + value
    if outcome.status != "completed":
        raise RunError(
            outcome.error_message or f"sub-agent {agent.name} {outcome.status}",
            outcome.error_code or RunErrorCode.SUBAGENT_FAILED,
        )
    await parent.writer.emit(SubAgentEnd, **frame, result=outcome.output)
    return outcome.output
