"""Framework-free responses of the chat handler: a status, headers and a body that is a string
or an async iterator of bytes (``chat.http.views.to_django`` makes them Django responses)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from chat.ai_sdk.events import UIMessageChunk
from chat.ai_sdk.sse import create_sse_headers, create_sse_stream
from streams.exceptions import HelixError

__all__ = ["STREAM_OPEN", "HandlerResponse", "build_sse_response", "error_response", "json_response"]

STREAM_OPEN = b": stream-open\n\n"


@dataclass
class HandlerResponse:
    """A framework-agnostic response."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: AsyncIterator[bytes] | str | None = None

    @property
    def is_stream(self) -> bool:
        return self.body is not None and not isinstance(self.body, str)


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> HandlerResponse:
    body = msgspec.json.encode(data).decode()
    return HandlerResponse(status, {"content-type": "application/json", **(headers or {})}, body)


def error_response(error: HelixError) -> HandlerResponse:
    """``{"error", "code"}`` with the error's status (and ``Retry-After`` when a retry may help)."""
    headers = {"Retry-After": str(error.retry_after)} if error.retry_after is not None else None
    return json_response(error.as_dict(), error.status_code, headers)


def build_sse_response(
    events: AsyncIterable[UIMessageChunk | tuple[UIMessageChunk, int | None]],
    headers: Mapping[str, str] | None = None,
    status: int = 200,
) -> HandlerResponse:
    """A UI message stream response of ``events`` (framed by :func:`create_sse_stream`), with the
    stream headers and ``headers`` added; ``chat.http.views.to_django`` makes it a Django response."""
    return HandlerResponse(status, create_sse_headers(headers), create_sse_stream(events))
