"""Sub-agents: an agent used as a tool of another, its chunks in the same stream."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from workers.runtime.context import ToolContext

__all__ = ["SubAgentTask", "run_subagent"]


class SubAgentTask(BaseModel):
    """The input of a sub-agent tool."""

    task: str = Field(description="What the sub-agent should do, in plain words.")


async def run_subagent(task: Any, context: ToolContext) -> Any:
    """Run the sub-agent of the calling tool and return its output (or final text)."""
    from workers.runtime.loop import run_child

    return await run_child(context, task)
