"""Tool execution: a step's tool calls validated, run concurrently, each ending in a tool message.

A call whose arguments are not JSON, or fail the tool's input schema, does not run: it is a
``tool_input_error`` and a failed result the model sees. A tool that raises is a failed
``tool_end``, never a failed run. Calls of client tools and of approval-gated tools do not run
here: they are returned as pending, and the step pauses on them (:mod:`workers.runtime.pauses`).
A sub-agent tool runs its agent (:mod:`workers.runtime.subagents`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, Protocol

import msgspec
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import to_jsonable_python

from streams.exceptions import StreamSupersededError
from streams.messages import StoredMessage
from streams.protocol import ToolApprovalRequest, ToolEnd, ToolInputError, ToolStart
from workers.exceptions import StopRequested
from workers.runtime.agents import Agent, Tool
from workers.runtime.context import ToolContext
from workers.runtime.persistence import PendingCallSpec
from workers.runtime.subagents import ParentRun, run_subagent
from workers.runtime.writer import RunWriter

__all__ = ["ParsedCall", "ToolHost", "jsonable", "run_tool", "run_tools", "tool_failed", "tool_succeeded"]


def jsonable(value: Any) -> Any:
    """``value`` as JSON-compatible data (what JSON cannot hold becomes its ``str``)."""
    return to_jsonable_python(value, fallback=str)


class ParsedCall:
    """A tool call the model made: its arguments parsed and validated against the tool's input
    schema into ``input``, or ``error`` saying why they are unusable (then the tool does not run)."""

    def __init__(self, call_id: str, name: str, raw: str, tool: Tool | None) -> None:
        self.call_id, self.name, self.raw, self.tool = call_id, name, raw, tool
        self.arguments: Any = raw
        self.input: Any = None
        self.error: str | None = None
        try:
            self.arguments = json.loads(raw) if raw.strip() else {}
        except ValueError:
            self.error = "The arguments are not valid JSON"
            return
        if tool is None:
            self.error = f"Unknown tool {name!r}"
            return
        try:
            self.input = tool.input_schema.model_validate(self.arguments)
        except PydanticValidationError as exc:
            self.error = f"Invalid arguments: {exc.errors(include_url=False, include_context=False)}"


class ToolHost(ParentRun, Protocol):
    """The loop whose tools run (a :class:`~workers.runtime.steps.RunLoop`): the run it belongs
    to, its agent, and the agent's state, which tools mutate in place."""

    run_id: str
    session_id: str
    agent: Agent
    state: dict[str, Any]


async def run_tools(host: ToolHost, calls: list[ParsedCall]) -> tuple[list[StoredMessage], list[PendingCallSpec]]:
    """Run the step's calls; those of client tools and approval gates wait (returned)."""
    writer = host.writer
    pending: list[PendingCallSpec] = []
    for call in calls:
        if call.error is not None:
            await writer.emit(
                ToolInputError, tool_call_id=call.call_id, tool_name=call.name, input=call.arguments, error=call.error
            )
            continue
        await writer.emit(ToolStart, tool_call_id=call.call_id, tool_name=call.name, arguments=call.arguments)
        assert call.tool is not None
        if call.tool.runs_on_client or call.tool.needs_approval:
            kind = "client_tool" if call.tool.runs_on_client else "approval"
            spec = PendingCallSpec(call.call_id, call.name, call.arguments, kind, str(uuid.uuid4()))
            pending.append(spec)
            if kind == "approval":
                await writer.emit(ToolApprovalRequest, tool_call_id=call.call_id, approval_id=spec.approval_id)
    waiting = {spec.tool_call_id for spec in pending}
    results = await asyncio.gather(*(run_tool(host, call) for call in calls if call.call_id not in waiting))
    return list(results), pending


async def run_tool(host: ToolHost, call: ParsedCall) -> StoredMessage:
    """Execute one call (a sub-agent's run for a sub-agent tool) and return its tool message."""
    if call.error is not None:
        return StoredMessage(role="tool", tool_call_id=call.call_id, content=call.error, metadata={"error": call.error})
    tool = call.tool
    assert tool is not None
    try:
        if tool.agent is not None:
            result = await run_subagent(host, tool.agent, call.call_id, call.input)
        else:
            assert tool.execute is not None
            context = ToolContext(host.run_id, host.session_id, call.call_id, call.name, host.state, host.writer)
            result = tool.execute(call.input, context)
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                result = await result
        result = jsonable(result)
    except (StopRequested, asyncio.CancelledError, StreamSupersededError):
        raise
    except Exception as exc:
        return await tool_failed(host.writer, call.call_id, str(exc) or type(exc).__name__)
    return await tool_succeeded(host.writer, call.call_id, result)


async def tool_succeeded(writer: RunWriter, call_id: str, result: Any) -> StoredMessage:
    """Announce call ``call_id``'s JSON ``result`` and return it as a tool message."""
    await writer.emit(ToolEnd, tool_call_id=call_id, result=result, success=True)
    return StoredMessage(role="tool", tool_call_id=call_id, content=msgspec.json.encode(result).decode())


async def tool_failed(writer: RunWriter, call_id: str, error: str) -> StoredMessage:
    """Announce that call ``call_id`` failed with ``error`` and return that as a tool message."""
    await writer.emit(ToolEnd, tool_call_id=call_id, result=None, success=False, error=error)
    return StoredMessage(role="tool", tool_call_id=call_id, content=error, metadata={"error": error})
