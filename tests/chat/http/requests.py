"""Requests as a signed-in browser makes them, through Django's async test client."""

from __future__ import annotations

import json
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient


def ui_body(text: str, chat_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": chat_id,
        "messages": [{"id": f"u-{uuid.uuid4().hex[:6]}", "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message",
        **extra,
    }


async def read_events(response: Any) -> list[dict[str, Any]]:
    raw = b"".join([part async for part in response.streaming_content])
    events = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    assert raw.endswith(b"data: [DONE]\n\n")
    return events


async def login(username: str) -> AsyncClient:
    user = await sync_to_async(User.objects.create_user)(username, password="pw-" + username)
    client = AsyncClient()
    await sync_to_async(client.force_login)(user)
    return client


async def post(client: AsyncClient, session_id: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    return await client.post(
        f"/api/chat/{session_id}", json.dumps(body), content_type="application/json", headers=headers
    )


def scope(path: str, method: str = "GET", headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The ASGI scope of an HTTP request, as a server passes it to the application."""
    return {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 5000),
        "scheme": "http",
        "http_version": "1.1",
    }
