"""Chunk factories for the stream tests."""

from __future__ import annotations

from typing import Any

from streams.protocol import TextDelta, now_ms


def text(delta: str, agent_id: str = "agent-1", **extra: Any) -> TextDelta:
    return TextDelta(agent_id=agent_id, timestamp=now_ms(), delta=delta, **extra)


def texts(count: int, prefix: str = "t") -> list[TextDelta]:
    return [text(f"{prefix}{i}") for i in range(count)]
