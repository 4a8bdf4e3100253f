"""Continuations: a POST whose last message is the assistant's reply, continued.

The AI SDK continues a reply after the page answered its tool calls (``addToolApprovalResponse``,
``addToolOutput``) or to have it go on. The server reads only what it cannot know from such a
message — the answers to the calls its run waits on — and checks the rest against what it stored.
"""

from __future__ import annotations

from chat.ai_sdk.state import RunInfo, StateStore
from chat.exceptions import DecisionRejectedError
from chat.http.parsing import ChatInput
from streams.exceptions import ValidationError

__all__ = ["continued_run"]


async def continued_run(store: StateStore, session_id: str, request: ChatInput) -> RunInfo | None:
    """Check a continuation against what the server stored; the paused run it answers, if any.

    The message continued must be the session's latest answer, and every tool call it speaks
    of one the server made. Only the answers to pending calls are read from it: a decision
    the client still shows as unapplied (or a client tool's result) for a call that is no
    longer pending is a decision sent again, refused with nothing changed.
    """
    run = await store.get_current_run(session_id)
    if run is None or run.message_id != request.continuation_of:
        raise ValidationError(
            f"messages: the assistant message {request.continuation_of!r} is not this session's latest answer"
        )
    decisions = await store.get_tool_decisions(session_id)
    if request.answers:
        stored = (await store.get_messages(session_id)).messages
        ours = [m for m in stored if m.role == "assistant" and m.id == run.message_id]
        made = {call.id for m in ours for call in m.tool_calls} | set(decisions)
        forged = [a.tool_call_id for a in request.answers if a.tool_call_id not in made]
        if forged:
            raise ValidationError(f"messages: tool call {forged[0]!r} is not one this session's assistant made")
    if run.status == "paused":
        return run
    for answer in request.answers:
        decision = decisions.get(answer.tool_call_id)
        if decision is not None and (answer.state == "approval-responded" or decision.kind == "client_tool"):
            raise DecisionRejectedError(f"Tool call {answer.tool_call_id} was answered already")
    return None
