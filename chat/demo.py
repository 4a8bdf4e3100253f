"""The stream demo served on the embedded default: start a stream, watch it over SSE, resume it.

``POST /demo/streams`` starts a demo producer and answers ``{"streamId", "eventsUrl"}``;
``GET /demo/streams/<id>/events`` serves the stream's Helix wire events as SSE, resuming after
``Last-Event-ID`` (or ``X-Resume-From-Sequence`` / ``X-Resume-At``).
"""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from chat.handler import error_response
from chat.views import to_django
from streams.backends import get_stream_manager
from streams.conf import helix_settings
from streams.exceptions import HelixError, StreamFailedError, StreamNotFoundError
from streams.sse import UI_MESSAGE_STREAM_HEADERS, extract_resume_position, wire_events, with_keep_alive
from workers.demo import start_demo_stream

__all__ = ["demo_page", "demo_stream_events", "start_demo"]

_SSE_HEADERS = {k: v for k, v in UI_MESSAGE_STREAM_HEADERS.items() if k not in ("connection", "content-type")}


@require_GET
def demo_page(request: HttpRequest) -> HttpResponse:
    """The demo page."""
    return render(request, "chat/demo.html")


@require_POST
async def start_demo(request: HttpRequest) -> JsonResponse:
    """Start a demo stream."""
    stream_id = uuid.uuid4().hex
    await start_demo_stream(get_stream_manager(), stream_id)
    url = reverse("demo-stream-events", args=[stream_id])
    return JsonResponse({"streamId": stream_id, "eventsUrl": url}, status=201)


@require_GET
async def demo_stream_events(request: HttpRequest, stream_id: str) -> HttpResponseBase:
    """The stream as SSE, from the client's resume position."""
    manager = get_stream_manager()
    try:
        position = extract_resume_position(request) or 0
        reader = await manager.create_resumable_reader(stream_id, position)
        if reader is None:
            info = await manager.get_stream_info(stream_id)
            if info is None:
                raise StreamNotFoundError(stream_id)
            raise StreamFailedError(stream_id, info.error)
    except HelixError as exc:
        return to_django(error_response(exc))
    body = with_keep_alive(wire_events(reader), helix_settings.SSE_KEEPALIVE_SECONDS)
    return StreamingHttpResponse(body, content_type="text/event-stream", headers=_SSE_HEADERS)
