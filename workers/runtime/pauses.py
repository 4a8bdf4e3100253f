"""Pause and resume: a step that waits on people, and the answers that let its run go on.

A step whose calls include client tools or approval-gated tools commits what it has with those
calls pending, writes ``run_paused`` and ends the attempt. Once every call has its answer, a new
attempt turns the answers into tool results (:func:`take_answers`): approved calls run now,
denied or expired ones become denials (``tool_output_denied``), a client tool's output or error
is taken as it is. The results are committed with the attempt's first step.
"""

from __future__ import annotations

import json

from streams.messages import StoredMessage
from streams.protocol import RunPaused, RunResumed, ToolOutputDenied
from workers.runtime.persistence import PendingCallSpec, ResolvedCall
from workers.runtime.tools import ParsedCall, ToolHost, jsonable, run_tool, tool_failed, tool_succeeded
from workers.runtime.writer import RunWriter

__all__ = ["announce_pause", "take_answers"]


async def announce_pause(writer: RunWriter, run_id: str, step: int, pending: list[PendingCallSpec]) -> None:
    """Say that run ``run_id`` waits after ``step`` on the ``pending`` calls (already committed)."""
    reason = "approval" if any(spec.kind == "approval" for spec in pending) else "client_tool"
    ids = [spec.tool_call_id for spec in pending]
    await writer.emit(RunPaused, run_id=run_id, step=step, reason=reason, pending_tool_call_ids=ids)


async def take_answers(host: ToolHost, answers: list[ResolvedCall]) -> list[StoredMessage]:
    """Resume ``host`` at its current step with ``answers``: the tool messages they make, in order."""
    reason = "approval" if any(answer.kind == "approval" for answer in answers) else "tool_result"
    await host.writer.emit(RunResumed, run_id=host.run_id, step=host.step, reason=reason)
    return [await _answer(host, answer) for answer in answers]


async def _answer(host: ToolHost, answer: ResolvedCall) -> StoredMessage:
    call_id = answer.tool_call_id
    if answer.status == "approved":
        raw = json.dumps(answer.arguments if answer.arguments is not None else {})
        return await run_tool(host, ParsedCall(call_id, answer.tool_name, raw, host.agent.tool(answer.tool_name)))
    if answer.status in ("denied", "expired"):
        reason = answer.reason or ("the approval expired" if answer.status == "expired" else "")
        await host.writer.emit(ToolOutputDenied, tool_call_id=call_id, reason=reason or None)
        text = "The user denied this tool call" + (f": {reason}" if reason else ".")
        return StoredMessage(role="tool", tool_call_id=call_id, content=text, metadata={"denied": True})
    if answer.error:
        return await tool_failed(host.writer, call_id, answer.error)
    return await tool_succeeded(host.writer, call_id, jsonable(answer.output))
