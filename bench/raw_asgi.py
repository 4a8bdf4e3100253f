"""The baseline of the HTTP benchmark: a bare ASGI app streaming N pre-encoded SSE events under
the same Daphne, one ``send`` per event (``/events?n=10000``)."""

from __future__ import annotations

from typing import Any

EVENT = b'id: 1\ndata: {"type":"text-delta","id":"text-1","delta":"some streamed words "}\n\n'


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    query = dict(part.split("=") for part in scope.get("query_string", b"").decode().split("&") if "=" in part)
    count = int(query.get("n", "10000"))
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for _ in range(count):
        await send({"type": "http.response.body", "body": EVENT, "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
