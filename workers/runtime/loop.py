"""The step loop: one model call per step, then its tool calls, then a commit.

Every event becomes a chunk in the session's stream. After each step the step's messages, the
agent's state and a checkpoint are committed together, and only then ``step_committed`` and
``checkpoint_created`` are written: a chunk never claims what the database does not hold.
Errors end the run with an ``error`` chunk and a recorded outcome, never a hung run or a
half-committed step. Sub-agents run as tools, their chunks tagged with their own agent id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

import msgspec
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import to_jsonable_python

from streams.backends.base import StreamManager
from streams.backends.writers import StreamWriter
from streams.exceptions import HelixError, StreamSupersededError
from streams.messages import StoredMessage, ToolCall
from streams.protocol import RunPaused, RunResumed, TextDelta, Thinking, ToolApprovalRequest, ToolOutputDenied, now_ms
from workers.llm.base import LLMError, ReasoningDelta, TextPiece, ToolCallDelta, ToolCallEnd, ToolCallStart, Usage
from workers.runtime.agents import Agent, Tool
from workers.runtime.context import StatePatchError, ToolContext, diff_state
from workers.runtime.persistence import (
    PendingCallSpec,
    ResolvedCall,
    RunOutcome,
    RunRecorder,
    RunSupersededError,
)

__all__ = ["RunError", "RunLoop", "run_child"]

logger = logging.getLogger(__name__)

STOP_CHECK_SECONDS = 0.5


class RunError(HelixError):
    """A run-level failure with a classification ``code``."""

    def __init__(self, message: str, code: str, recoverable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.recoverable = recoverable


class _Interrupted(Exception):
    pass


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=str)


class _PendingCall:
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


class RunLoop:
    """Runs one agent over one session's stream. The root loop of a run persists every step
    through ``recorder``; a sub-agent's loop (``parent`` set) keeps its history in memory."""

    def __init__(
        self,
        agent: Agent,
        *,
        session_id: str,
        run_id: str,
        streams: StreamManager,
        recorder: RunRecorder | None,
        agent_id: str | None = None,
        parent: RunLoop | None = None,
        epoch: int | None = None,
    ) -> None:
        self.agent = agent
        self.session_id = session_id
        self.run_id = run_id
        self.streams = streams
        self.recorder = recorder
        self.agent_id = agent_id or run_id
        self.parent = parent
        self.epoch: int | None = epoch if parent is None else parent.epoch  # fences the attempt's writes
        self.step = 0
        self.state: dict[str, Any] = {}
        self.messages: list[StoredMessage] = []
        self.message_id: str | None = None
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}
        self._writer: StreamWriter | None = None
        self._last_stop_check = 0.0
        self._answers: list[StoredMessage] = []  # tool results of a resumed pause, committed next
        self._applied: list[str] = []

    # -- writing ---------------------------------------------------------------------------------

    @property
    def writer(self) -> StreamWriter:
        assert self._writer is not None, "the run has not started"
        return self._writer

    async def write(self, chunk: dict[str, Any]) -> None:
        await self.writer.write(chunk)

    async def _open(self) -> None:
        self._writer = await self.streams.create_writer(
            self.session_id, self.agent_id, self.agent.name, buffered=True, epoch=self.epoch
        )

    # -- the run ---------------------------------------------------------------------------------

    async def run(
        self,
        *,
        messages: list[StoredMessage] | None = None,
        state: dict[str, Any] | None = None,
        message_id: str | None = None,
        first_step: int = 1,
    ) -> RunOutcome:
        """Run to the end and return how it ended (recorded by the caller).

        A new attempt of a run starts at ``first_step``, after the steps committed before it.
        A superseded attempt (:class:`RunSupersededError`, :class:`StreamSupersededError`)
        raises: it has nothing left to record.
        """
        if messages is None or state is None:
            assert self.recorder is not None
            session = await self.recorder.load_session(self.session_id)
            messages, state = session.messages, session.state
        self.messages, self.state, self.message_id = list(messages), dict(state), message_id
        await self._open()
        try:
            if self.parent is None and self.recorder is not None:
                await self._apply_answers(await self.recorder.resolved_calls(self.run_id), first_step)
            return await self._steps(first_step)
        except (RunSupersededError, StreamSupersededError):
            raise
        except _Interrupted:
            await self.write(
                {"type": "run_interrupted", "runId": self.run_id, "step": self.step, "reason": "user_stop"}
            )
            return RunOutcome("interrupted", usage=dict(self.usage))
        except (LLMError, RunError, StatePatchError) as exc:
            return await self._fail(str(exc), exc.code, getattr(exc, "recoverable", False))
        except Exception as exc:  # a bug or an unexpected failure: recorded, never a hung run
            logger.exception("run %s failed", self.run_id)
            return await self._fail(f"{type(exc).__name__}: {exc}", "internal_error", False)
        finally:
            try:
                await self.writer.close()
            except StreamSupersededError:
                pass  # a newer attempt holds the stream: what this one buffered is void
            except HelixError:
                logger.exception("could not flush the last chunks of run %s", self.run_id)

    async def _fail(self, message: str, code: str, recoverable: bool) -> RunOutcome:
        await self.write(
            {"type": "error", "error": message, "code": code, "recoverable": recoverable, "step": self.step}
        )
        return RunOutcome("failed", error_code=code, error_message=message, usage=dict(self.usage))

    async def _check_stop(self, force: bool = False) -> None:
        if self.recorder is None or self.parent is not None:
            return
        now = time.monotonic()
        if not force and now - self._last_stop_check < STOP_CHECK_SECONDS:
            return
        self._last_stop_check = now
        if await self.recorder.run_status(self.run_id) == "interrupted":
            raise _Interrupted

    async def _steps(self, first_step: int) -> RunOutcome:
        for step in range(first_step, self.agent.max_steps + 1):
            self.step = step
            await self._check_stop(force=True)
            if self.parent is None:
                await self.writer.begin_step(step)
            state_before = json.loads(json.dumps(self.state, default=str))
            assistant, calls = await self._call_model()
            step_messages = [assistant]
            pending: list[PendingCallSpec] = []
            if calls:
                results, pending = await self._run_tools(calls)
                step_messages += results
            patch = diff_state(state_before, self.state)
            if patch:
                await self.write({"type": "state_patch", "patches": patch})
            if pending:
                return await self._pause(step_messages, pending)
            output: Any = None
            if not calls and self.agent.output_schema is not None:
                output = self._validate_output(assistant.content)
            await self._commit(step_messages)
            if not calls:
                if output is not None:
                    await self.write({"type": "output", "output": output})
                return RunOutcome(
                    "completed", output=output if output is not None else assistant.content, usage=dict(self.usage)
                )
        raise RunError(f"The agent did not finish within {self.agent.max_steps} steps", "max_steps_exceeded")

    def _validate_output(self, text: str) -> Any:
        schema = self.agent.output_schema
        assert schema is not None
        try:
            return schema.model_validate_json(text.strip()).model_dump(mode="json")
        except PydanticValidationError as exc:
            raise RunError(
                f"The final answer does not match the output schema: {exc}", "output_validation_failed"
            ) from None

    async def _pause(self, step_messages: list[StoredMessage], pending: list[PendingCallSpec]) -> RunOutcome:
        """Commit the step so far with the calls it waits on, and stop until they are answered."""
        if self.parent is not None or self.recorder is None:
            raise RunError("Only a run's own agent can wait on a person, not a sub-agent", "unsupported_pause")
        await self._commit(step_messages, pending)
        kinds = {spec.kind for spec in pending}
        await self.writer.write(
            RunPaused(
                agent_id=self.agent_id,
                agent_type=self.agent.name,
                timestamp=now_ms(),
                run_id=self.run_id,
                step=self.step,
                reason="approval" if "approval" in kinds else "client_tool",
                pending_tool_call_ids=[spec.tool_call_id for spec in pending],
            )
        )
        return RunOutcome("paused", usage=dict(self.usage))

    async def _apply_answers(self, answers: list[ResolvedCall], first_step: int) -> None:
        """Turn the answers to a pause into tool results: run approved calls, deny the others,
        take client results as they are. They are committed with the next step."""
        if not answers:
            return
        self.step = first_step - 1
        state_before = json.loads(json.dumps(self.state, default=str))
        await self.writer.write(
            RunResumed(
                agent_id=self.agent_id,
                agent_type=self.agent.name,
                timestamp=now_ms(),
                run_id=self.run_id,
                step=self.step,
                reason="approval" if any(a.kind == "approval" for a in answers) else "tool_result",
            )
        )
        for answer in answers:
            self._answers.append(await self._answer(answer))
            self._applied.append(answer.tool_call_id)
        self.messages += self._answers
        patch = diff_state(state_before, self.state)
        if patch:
            await self.write({"type": "state_patch", "patches": patch})

    async def _answer(self, answer: ResolvedCall) -> StoredMessage:
        call_id = answer.tool_call_id
        if answer.status == "approved":
            raw = json.dumps(answer.arguments if answer.arguments is not None else {})
            return await self._run_tool(_PendingCall(call_id, answer.tool_name, raw, self.agent.tool(answer.tool_name)))
        if answer.status in ("denied", "expired"):
            reason = answer.reason or ("the approval expired" if answer.status == "expired" else "")
            await self.writer.write(
                ToolOutputDenied(
                    agent_id=self.agent_id,
                    agent_type=self.agent.name,
                    timestamp=now_ms(),
                    tool_call_id=call_id,
                    reason=reason or None,
                )
            )
            text = "The user denied this tool call" + (f": {reason}" if reason else ".")
            return StoredMessage(role="tool", tool_call_id=call_id, content=text, metadata={"denied": True})
        if answer.error:
            await self.write({"type": "tool_end", "toolCallId": call_id, "success": False, "error": answer.error})
            return StoredMessage(
                role="tool", tool_call_id=call_id, content=answer.error, metadata={"error": answer.error}
            )
        result = _jsonable(answer.output)
        await self.write({"type": "tool_end", "toolCallId": call_id, "result": result})
        return StoredMessage(role="tool", tool_call_id=call_id, content=msgspec.json.encode(result).decode())

    async def _commit(self, step_messages: list[StoredMessage], pending: list[PendingCallSpec] | None = None) -> None:
        self.messages += step_messages
        if self.recorder is None or self.parent is not None:
            return
        step_messages = [*self._answers, *step_messages]  # a resumed pause's results come first
        applied, self._answers, self._applied = self._applied, [], []
        sequence = await self.writer.flush() or 0
        checkpoint_id, count = await self.recorder.commit_step(
            self.run_id,
            self.step,
            step_messages,
            json.loads(json.dumps(self.state, default=str)),
            sequence,
            epoch=self.epoch,
            pending=pending or None,
            applied=applied or None,
        )
        await self.write({"type": "step_committed", "runId": self.run_id, "step": self.step, "messageCount": count})
        await self.write(
            {
                "type": "checkpoint_created",
                "runId": self.run_id,
                "checkpointId": checkpoint_id,
                "step": self.step,
                "messageCount": count,
            }
        )

    # -- one model call --------------------------------------------------------------------------

    async def _call_model(self) -> tuple[StoredMessage, list[_PendingCall]]:
        model = self.agent.model()
        definitions = [tool.definition() for tool in self.agent.tools]
        text: list[str] = []
        reasoning: list[str] = []
        reasoning_open = False
        streamed: set[str] = set()
        ends: list[ToolCallEnd] = []
        async for event in model.stream(self.agent.system_prompt, self.messages, definitions):
            await self._check_stop()
            if isinstance(event, ReasoningDelta):
                reasoning.append(event.text)
                reasoning_open = True
                await self.writer.write(
                    Thinking(agent_id=self.agent_id, agent_type=self.agent.name, timestamp=now_ms(), content=event.text)
                )
                continue
            if reasoning_open:
                reasoning_open = False
                await self.write({"type": "thinking", "content": "", "isComplete": True})
            if isinstance(event, TextPiece):  # the hot path: a typed chunk, no dict to fill in
                text.append(event.text)
                await self.writer.write(
                    TextDelta(agent_id=self.agent_id, agent_type=self.agent.name, timestamp=now_ms(), delta=event.text)
                )
            elif isinstance(event, ToolCallStart):
                streamed.add(event.call_id)
                await self.write({"type": "tool_arg_stream_start", "toolCallId": event.call_id, "toolName": event.name})
            elif isinstance(event, ToolCallDelta):
                await self.write(
                    {"type": "tool_arg_stream_delta", "toolCallId": event.call_id, "delta": event.arguments}
                )
            elif isinstance(event, ToolCallEnd):
                ends.append(event)
            elif isinstance(event, Usage):
                self.usage["prompt_tokens"] += event.prompt_tokens
                self.usage["completion_tokens"] += event.completion_tokens
        if reasoning_open:
            await self.write({"type": "thinking", "content": "", "isComplete": True})
        calls = [_PendingCall(end.call_id, end.name, end.arguments, self.agent.tool(end.name)) for end in ends]
        for call in calls:
            if call.call_id in streamed and not isinstance(call.arguments, str):
                await self.write(
                    {
                        "type": "tool_arg_stream_end",
                        "toolCallId": call.call_id,
                        "toolName": call.name,
                        "arguments": call.arguments,
                    }
                )
        assistant = StoredMessage(
            role="assistant",
            id=self.message_id if self.parent is None else None,
            content="".join(text),
            reasoning="".join(reasoning) or None,
            tool_calls=[ToolCall(id=c.call_id, name=c.name, arguments=c.arguments) for c in calls],
        )
        return assistant, calls

    # -- tools -----------------------------------------------------------------------------------

    async def _run_tools(self, calls: list[_PendingCall]) -> tuple[list[StoredMessage], list[PendingCallSpec]]:
        """Run the step's calls; those of client tools and approval gates wait (returned)."""
        pending: list[PendingCallSpec] = []
        for call in calls:
            if call.error is not None:
                await self.write(
                    {
                        "type": "tool_input_error",
                        "toolCallId": call.call_id,
                        "toolName": call.name,
                        "input": call.arguments,
                        "error": call.error,
                    }
                )
            else:
                await self.write(
                    {
                        "type": "tool_start",
                        "toolCallId": call.call_id,
                        "toolName": call.name,
                        "arguments": call.arguments,
                    }
                )
                assert call.tool is not None
                if call.tool.runs_on_client or call.tool.needs_approval:
                    spec = PendingCallSpec(
                        call.call_id,
                        call.name,
                        call.arguments,
                        "client_tool" if call.tool.runs_on_client else "approval",
                        str(uuid.uuid4()),
                    )
                    pending.append(spec)
                    if spec.kind == "approval":
                        await self.writer.write(
                            ToolApprovalRequest(
                                agent_id=self.agent_id,
                                agent_type=self.agent.name,
                                timestamp=now_ms(),
                                tool_call_id=call.call_id,
                                approval_id=spec.approval_id,
                            )
                        )
        waiting = {spec.tool_call_id for spec in pending}
        results = await asyncio.gather(*(self._run_tool(call) for call in calls if call.call_id not in waiting))
        return list(results), pending

    async def _run_tool(self, call: _PendingCall) -> StoredMessage:
        if call.error is not None:
            return StoredMessage(
                role="tool", tool_call_id=call.call_id, content=call.error, metadata={"error": call.error}
            )
        assert call.tool is not None and call.tool.execute is not None
        context = ToolContext(self, call.call_id, call.name, self.state)
        try:
            result = call.tool.execute(call.input, context)
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                result = await result
            result = _jsonable(result)
        except (_Interrupted, asyncio.CancelledError, RunSupersededError, StreamSupersededError):
            raise
        except Exception as exc:
            error = str(exc) or type(exc).__name__
            await self.write({"type": "tool_end", "toolCallId": call.call_id, "success": False, "error": error})
            return StoredMessage(role="tool", tool_call_id=call.call_id, content=error, metadata={"error": error})
        await self.write({"type": "tool_end", "toolCallId": call.call_id, "result": result})
        return StoredMessage(role="tool", tool_call_id=call.call_id, content=msgspec.json.encode(result).decode())


async def run_child(context: ToolContext, task: Any) -> Any:
    """Run the sub-agent behind ``context``'s tool; its result is the tool's result."""
    parent = context.loop
    tool = parent.agent.tool(context.tool_name)
    assert tool is not None and tool.agent is not None
    child_agent = tool.agent
    sub_session_id = f"{parent.agent_id}/{context.tool_call_id}"
    common = {
        "step": parent.step,
        "subAgentType": child_agent.name,
        "subSessionId": sub_session_id,
        "callId": context.tool_call_id,
    }
    await parent.write({"type": "subagent_start", **common})
    await parent.writer.flush()  # the start lands before the child's first chunk
    child = RunLoop(
        child_agent,
        session_id=parent.session_id,
        run_id=parent.run_id,
        streams=parent.streams,
        recorder=parent.recorder,
        agent_id=sub_session_id,
        parent=parent,
    )
    prompt = getattr(task, "task", None) or json.dumps(_jsonable(task))
    outcome = await child.run(messages=[StoredMessage(role="user", content=prompt)], state={})
    for key, value in outcome.usage.items():
        parent.usage[key] = parent.usage.get(key, 0) + value
    if outcome.status != "completed":
        raise RunError(
            outcome.error_message or f"sub-agent {child_agent.name} {outcome.status}",
            outcome.error_code or "subagent_failed",
        )
    result = _jsonable(outcome.output)
    await parent.write({"type": "subagent_end", **common, "result": result})
    return result
