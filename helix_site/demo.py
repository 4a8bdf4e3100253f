"""The demo site's pages: the chat page at ``/`` and the raw stream demo at ``/demo/``.

None of this ships in the package: a site that includes ``chat.urls`` gets the API only.
``POST /demo/streams`` starts a demo producer and answers ``{"streamId", "eventsUrl"}``;
``GET /demo/streams/<id>/events`` serves the stream's Helix wire events as SSE, resuming after
``Last-Event-ID`` (or ``X-Resume-From-Sequence`` / ``X-Resume-At``). Both go through the same
pipeline as the API, and a demo stream is readable only from the browser session that started it.
"""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET
from rest_framework.request import Request

from chat.http.pipeline import HelixAPIView
from chat.http.responses import HandlerResponse
from chat.http.views import to_django
from chat.state.db import db
from helix_site.stream_demo import start_demo_stream
from streams.backends import get_stream_manager
from streams.conf import helix_settings
from streams.exceptions import StreamFailedError, StreamNotFoundError
from streams.sse import UI_MESSAGE_STREAM_HEADERS, extract_resume_position, wire_events

__all__ = ["DemoEventsView", "StartDemoView", "chat_page", "demo_page"]

DEMO_STREAMS_KEY = "helix_demo_streams"


@require_GET
def chat_page(request: HttpRequest) -> HttpResponse:
    """The demo chat page."""
    return render(request, "helix_site/chat.html")


@require_GET
def react_page(request: HttpRequest) -> HttpResponse:
    """The demo chat page in React (``useResumableChat``), built with Vite on ai 6, or on ai 7
    with ``?ai=7``."""
    return _react(request, "chat")


@require_GET
def readme_page(request: HttpRequest) -> HttpResponse:
    """The README's React example as written, built with Vite like the React page."""
    return _react(request, "readme")


def _react(request: HttpRequest, page: str) -> HttpResponse:
    line = "7" if request.GET.get("ai") == "7" else "6"
    bundle = f"helix_site/vendor/react-ai{line}/{page}.js"
    return render(request, "helix_site/react.html", {"line": line, "bundle": bundle})


@require_GET
def demo_page(request: HttpRequest) -> HttpResponse:
    """The raw stream demo page."""
    return render(request, "helix_site/demo.html")


class StartDemoView(HelixAPIView):
    """POST: start a demo stream owned by this browser session."""

    async def post(self, request: Request) -> HttpResponseBase:
        stream_id = uuid.uuid4().hex
        session = request._request.session

        def remember() -> None:
            session[DEMO_STREAMS_KEY] = [*session.get(DEMO_STREAMS_KEY, [])[-19:], stream_id]
            session.save()

        await db(remember)()
        await start_demo_stream(get_stream_manager(), stream_id)
        url = reverse("demo-stream-events", args=[stream_id])
        return JsonResponse({"streamId": stream_id, "eventsUrl": url}, status=201)


class DemoEventsView(HelixAPIView):
    """GET: the stream as SSE, from the client's resume position."""

    async def get(self, request: Request, stream_id: str) -> HttpResponseBase:
        session = request._request.session
        owned = await db(lambda: list(session.get(DEMO_STREAMS_KEY, [])))()
        if stream_id not in owned:
            raise StreamNotFoundError(stream_id)
        manager = get_stream_manager()
        position = extract_resume_position(request) or 0
        reader = await manager.create_resumable_reader(stream_id, position)
        if reader is None:
            info = await manager.get_stream_info(stream_id)
            if info is None:
                raise StreamNotFoundError(stream_id)
            raise StreamFailedError(stream_id, info.error)
        body = wire_events(reader, keep_alive=float(helix_settings.SSE_KEEPALIVE_SECONDS))
        return to_django(HandlerResponse(200, dict(UI_MESSAGE_STREAM_HEADERS), body))
