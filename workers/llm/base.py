"""The LLM interface: one streamed completion over a conversation and a set of tools.

An adapter yields :data:`LLMEvent` values in order: reasoning and text deltas, tool calls whose
arguments may stream, and usage. Errors are raised as :class:`~workers.exceptions.LLMError` with
a classification code and whether retrying may help.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from streams.messages import StoredMessage

__all__ = [
    "LLM",
    "LLMEvent",
    "ReasoningDelta",
    "TextPiece",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolDefinition",
    "Usage",
]


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool as the model sees it: name, description and JSON schema of its input."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TextPiece:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    call_id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    call_id: str
    arguments: str  # a fragment of the raw JSON argument text


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    call_id: str
    name: str
    arguments: str  # the complete raw argument text


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


LLMEvent = TextPiece | ReasoningDelta | ToolCallStart | ToolCallDelta | ToolCallEnd | Usage


class LLM(abc.ABC):
    """A model that streams one completion."""

    #: Whether tool arguments arrive as deltas (``ToolCallStart``/``ToolCallDelta``) before ``ToolCallEnd``.
    streams_tool_arguments: bool = True

    @abc.abstractmethod
    def stream(
        self, system_prompt: str, messages: list[StoredMessage], tools: list[ToolDefinition]
    ) -> AsyncIterator[LLMEvent]:
        """Stream the model's next message for ``messages``."""
