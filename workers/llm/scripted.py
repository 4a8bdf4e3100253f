"""A deterministic scripted model: what the demo agents and most tests run on.

A script is a function from the conversation to the next turn (:class:`ScriptedTurn`). The model
streams that turn word by word, with a delay per token (``HELIX["SCRIPTED_DELAY_MS"]``, default a
random-looking but deterministic 20-40 ms), so runs look and time like a real model's. The same
conversation always gives the same answer, tool call ids included.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from streams.messages import StoredMessage
from workers.exceptions import LLMError, RunErrorCode
from workers.llm.base import (
    LLM,
    LLMEvent,
    ReasoningDelta,
    TextPiece,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolDefinition,
    Usage,
)

__all__ = ["ScriptedModel", "ScriptedToolCall", "ScriptedTurn", "conversation_key", "token_delay"]


@dataclass(frozen=True)
class ScriptedToolCall:
    name: str
    arguments: dict[str, Any] | str  # a str is sent as is (for example invalid JSON)


@dataclass(frozen=True)
class ScriptedTurn:
    """The model's next message: reasoning, text, tool calls, or an error to raise."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)
    error: LLMError | None = None
    error_after_tokens: int = 0  # stream this many text tokens before raising ``error``


Script = Callable[[list[StoredMessage]], ScriptedTurn]


def conversation_key(messages: list[StoredMessage]) -> str:
    """A short stable digest of a conversation."""
    digest = hashlib.sha256()
    for message in messages:
        digest.update(f"{message.role}\0{message.content}\0{message.tool_call_id or ''}\0".encode())
        for call in message.tool_calls:
            digest.update(f"{call.id}\0{call.name}\0".encode())
    return digest.hexdigest()[:12]


def token_delay() -> tuple[float, float]:
    """The (min, max) per-token delay in seconds from ``HELIX["SCRIPTED_DELAY_MS"]`` ("30" or "20-40")."""
    from streams.conf import helix_settings

    raw = str(helix_settings.SCRIPTED_DELAY_MS).strip()
    low, _, high = raw.partition("-")
    try:
        lo, hi = float(low), float(high or low)
    except ValueError:
        raise LLMError(f"HELIX['SCRIPTED_DELAY_MS'] must be a number or a range like 20-40, not {raw!r}") from None
    return max(0.0, lo) / 1000, max(0.0, hi, lo) / 1000


_TOKENS = re.compile(r"\S+\s*|\s+")


class ScriptedModel(LLM):
    """Streams the turns a script decides. ``delay``: (min, max) seconds per token, default from
    the environment; ``(0, 0)`` for none."""

    def __init__(
        self, script: Script, *, delay: tuple[float, float] | None = None, stream_tool_arguments: bool = True
    ) -> None:
        self.script = script
        self.delay = delay
        self.streams_tool_arguments = stream_tool_arguments

    def _pause(self, key: str, index: int) -> float:
        low, high = self.delay if self.delay is not None else token_delay()
        if high <= 0:
            return 0.0
        jitter = int(hashlib.blake2b(f"{key}:{index}".encode(), digest_size=2).hexdigest(), 16) / 65535
        return low + (high - low) * jitter

    async def stream(
        self, system_prompt: str, messages: list[StoredMessage], tools: list[ToolDefinition]
    ) -> AsyncIterator[LLMEvent]:
        turn = self.script(messages)
        key = conversation_key(messages)
        tokens = 0

        async def tick() -> None:
            nonlocal tokens
            tokens += 1
            pause = self._pause(key, tokens)
            if pause:
                await asyncio.sleep(pause)
            elif tokens % 64 == 0:
                await asyncio.sleep(0)  # no delay: still let other runs have the loop now and then

        for piece in _TOKENS.findall(turn.reasoning):
            await tick()
            yield ReasoningDelta(piece)
        for index, piece in enumerate(_TOKENS.findall(turn.text)):
            if turn.error is not None and index >= turn.error_after_tokens:
                break
            await tick()
            yield TextPiece(piece)
        if turn.error is not None:
            raise turn.error
        names = {tool.name for tool in tools}
        for index, call in enumerate(turn.tool_calls):
            if call.name not in names:
                raise LLMError(f"script called unknown tool {call.name!r}", code=RunErrorCode.INVALID_RESPONSE)
            call_id = f"call_{key}_{index}"
            raw = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            if self.streams_tool_arguments:
                yield ToolCallStart(call_id, call.name)
                for cut in range(0, len(raw), 12):
                    await tick()
                    yield ToolCallDelta(call_id, raw[cut : cut + 12])
            yield ToolCallEnd(call_id, call.name, raw)
        prompt = sum(len(m.content.split()) for m in messages) + len(system_prompt.split())
        yield Usage(prompt_tokens=prompt, completion_tokens=tokens)
