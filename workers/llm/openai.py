"""An OpenAI-compatible chat model (OpenAI, Azure OpenAI, vLLM, Ollama, LiteLLM proxy, …) on the
official ``openai`` SDK, streamed.

Configured per agent or from ``HELIX["LLM"]``: ``MODEL``, ``BASE_URL``, ``API_KEY_ENV`` (the
environment variable holding the key, default ``OPENAI_API_KEY``), ``MAX_RETRIES``, ``TIMEOUT``.
429 is ``provider_rate_limited`` and 5xx ``provider_overloaded``: both recoverable and retried
with exponential backoff a bounded number of times, but only before the first token streamed
(after that a retry would repeat text the client already shows).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
from openai import AsyncOpenAI

from streams.backoff import Backoff
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

__all__ = ["OpenAIChatModel", "classify_error", "to_openai_messages"]


def classify_error(exc: BaseException) -> LLMError:
    """The typed error for an SDK exception."""
    if isinstance(exc, LLMError):
        return exc
    if isinstance(exc, openai.RateLimitError):
        return LLMError(
            f"The model provider is rate limiting: {exc}", RunErrorCode.PROVIDER_RATE_LIMITED, recoverable=True
        )
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code >= 500:
            return LLMError(
                f"The model provider is overloaded ({exc.status_code}): {exc}",
                RunErrorCode.PROVIDER_OVERLOADED,
                recoverable=True,
            )
        if exc.status_code in (401, 403):
            return LLMError(
                f"The model provider refused the credentials ({exc.status_code})",
                RunErrorCode.PROVIDER_AUTH,
                recoverable=False,
            )
        return LLMError(
            f"The model provider rejected the request ({exc.status_code}): {exc}",
            RunErrorCode.PROVIDER_BAD_REQUEST,
            recoverable=False,
        )
    if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError)):
        return LLMError(
            f"The model provider is unreachable: {exc}", RunErrorCode.PROVIDER_UNAVAILABLE, recoverable=True
        )
    return LLMError(
        f"The model provider failed: {type(exc).__name__}: {exc}", RunErrorCode.PROVIDER_ERROR, recoverable=False
    )


def to_openai_messages(system_prompt: str, messages: list[StoredMessage]) -> list[dict[str, Any]]:
    """Storage messages as chat-completion messages."""
    converted: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for message in messages:
        if message.role == "tool":
            converted.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
        elif message.role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": message.content or None}
            if message.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": call.arguments
                            if isinstance(call.arguments, str)
                            else json.dumps(call.arguments),
                        },
                    }
                    for call in message.tool_calls
                ]
            converted.append(item)
        else:
            converted.append({"role": message.role, "content": message.content})
    return converted


class OpenAIChatModel(LLM):
    """Streams chat completions from an OpenAI-compatible endpoint."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 3,
        backoff: float = 0.5,
        timeout: float = 60.0,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.max_retries = max_retries
        self.backoff = backoff
        self.extra_body = extra_body or {}
        # The SDK's own retries are off: ours classify, back off and stop once tokens flowed.
        self.client = AsyncOpenAI(base_url=base_url, api_key=api_key or "not-set", max_retries=0, timeout=timeout)

    @classmethod
    def from_settings(cls, **overrides: Any) -> OpenAIChatModel:
        """The model configured in ``HELIX["LLM"]`` (``MODEL``, ``BASE_URL``, ``API_KEY``,
        ``MAX_RETRIES``, ``TIMEOUT``), with ``overrides``. The site's settings map its secrets in;
        the OpenAI SDK reads ``OPENAI_API_KEY`` itself when ``API_KEY`` is unset."""
        from streams.conf import helix_settings

        config = dict(helix_settings.LLM or {})
        options: dict[str, Any] = {
            "base_url": config.get("BASE_URL"),
            "api_key": config.get("API_KEY"),
            "max_retries": int(config.get("MAX_RETRIES", 3)),
            "timeout": float(config.get("TIMEOUT", 60)),
        }
        options.update(overrides)
        model = options.pop("model", None) or config.get("MODEL") or "gpt-4o-mini"
        return cls(model, **options)

    async def _open(self, params: dict[str, Any]) -> Any:
        backoff = Backoff(initial=self.backoff, cap=None, jitter=1.0, attempts=self.max_retries)
        while True:
            try:
                return await self.client.chat.completions.create(**params)
            except Exception as exc:
                error = classify_error(exc)
                if not error.recoverable or not await backoff.wait():
                    raise error from exc

    async def stream(
        self, system_prompt: str, messages: list[StoredMessage], tools: list[ToolDefinition]
    ) -> AsyncIterator[LLMEvent]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(system_prompt, messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in tools
            ]
        if self.extra_body:
            params["extra_body"] = self.extra_body
        stream = await self._open(params)
        calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        try:
            async for chunk in stream:
                if getattr(chunk, "usage", None):
                    usage = chunk.usage
                    yield Usage(prompt_tokens=usage.prompt_tokens or 0, completion_tokens=usage.completion_tokens or 0)
                for choice in chunk.choices or []:
                    delta = choice.delta
                    reasoning = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
                    if reasoning:
                        yield ReasoningDelta(str(reasoning))
                    if delta.content:
                        yield TextPiece(delta.content)
                    for call in delta.tool_calls or []:
                        entry = calls.get(call.index)
                        if entry is None:
                            name = call.function.name if call.function and call.function.name else ""
                            entry = calls[call.index] = [call.id or f"call_{call.index}", name, ""]
                            yield ToolCallStart(entry[0], entry[1])
                        if call.function and call.function.arguments:
                            entry[2] += call.function.arguments
                            yield ToolCallDelta(entry[0], call.function.arguments)
        except LLMError:
            raise
        except Exception as exc:
            raise classify_error(exc) from exc
        for call_id, name, arguments in calls.values():
            yield ToolCallEnd(call_id, name, arguments)
