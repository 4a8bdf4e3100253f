"""The HTTP surface of Helix chat.

``/api/chat/<id>``: POST starts or continues a run and streams it, GET resumes it, DELETE removes
the session; ``/stream`` is the resume URL ``useChat({resume: true})`` calls; ``/snapshot``,
``/messages`` and ``/stop``; ``/api/sessions`` lists the caller's sessions. Stream views are async
(no thread is held per open stream); a client that disconnects closes its reader, not the run.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt
from rest_framework import generics, pagination, serializers
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.permissions import BasePermission

from chat.access import (
    Caller,
    NotFoundError,
    RateLimitedError,
    authorize,
    caller_of,
    check_rate_limit,
    session_access,
)
from chat.handler import HandlerResponse, error_response
from chat.models import Session
from chat.runtime import get_handler
from chat.store import db
from streams.backends import get_stream_manager
from streams.conf import helix_settings
from streams.exceptions import HelixError, ValidationError

__all__ = [
    "SessionListView",
    "agents_view",
    "chat_endpoint",
    "chat_page",
    "messages_view",
    "snapshot_view",
    "stop_view",
    "stream_endpoint",
]


class PayloadTooLargeError(HelixError):
    """The request body is too large."""

    code = "PAYLOAD_TOO_LARGE"
    status_code = 413


def to_django(response: HandlerResponse) -> HttpResponseBase:
    """A :class:`HandlerResponse` as a Django response (streaming when its body is)."""
    headers = {k: v for k, v in response.headers.items() if k.lower() not in ("connection", "content-type")}
    content_type = response.headers.get("content-type", "application/json")
    if response.is_stream:
        return StreamingHttpResponse(response.body, status=response.status, content_type=content_type, headers=headers)  # type: ignore[arg-type]
    return HttpResponse(response.body or "", status=response.status, content_type=content_type, headers=headers)


def _error(exc: HelixError) -> HttpResponseBase:
    response = to_django(error_response(exc))
    if isinstance(exc, RateLimitedError):
        response["Retry-After"] = str(exc.retry_after)
    return response


def _csrf_failure(request: HttpRequest, caller: Caller) -> HttpResponseBase | None:
    """Browsers authenticated by their cookie need a CSRF token; token clients do not."""
    if caller.via_token:
        return None
    failure = CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, None, (), {})  # type: ignore[arg-type]
    if failure is None:
        return None
    return JsonResponse({"error": "CSRF token missing or incorrect", "code": "CSRF_FAILED"}, status=403)


def _json_body(request: HttpRequest) -> Any:
    limit = int(helix_settings.MAX_BODY_BYTES)
    declared = request.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"The body is larger than {limit} bytes")
    try:
        raw = request.body
    except RequestDataTooBig:
        raise PayloadTooLargeError(f"The body is larger than {limit} bytes") from None
    if len(raw) > limit:
        raise PayloadTooLargeError(f"The body is larger than {limit} bytes")
    try:
        return json.loads(raw or b"null")
    except ValueError as exc:
        raise ValidationError(f"The body is not valid JSON: {exc}") from None


@csrf_exempt
async def chat_endpoint(request: HttpRequest, session_id: str) -> HttpResponseBase:
    """POST: start or continue a run and stream it. GET: resume. DELETE: remove the session."""
    try:
        caller = await caller_of(request)
        if request.method == "POST":
            if (failure := _csrf_failure(request, caller)) is not None:
                return failure
            body = await db(_json_body)(request)
            await session_access(caller, session_id)
            await db(check_rate_limit)(caller)
            response = await get_handler().handle_post(session_id, body, owner_id=caller.user_id)
            if response.status == 200 and caller.user_id is None:
                await caller.remember(session_id)
            return to_django(response)
        if request.method == "GET":
            return await _resume(request, caller, session_id)
        if request.method == "DELETE":
            if (failure := _csrf_failure(request, caller)) is not None:
                return failure
            if not await session_access(caller, session_id):
                raise _not_found(session_id)
            await _delete(session_id)
            return HttpResponse(status=204)
    except HelixError as exc:
        return _error(exc)
    return JsonResponse({"error": f"Method {request.method} not allowed", "code": "METHOD_NOT_ALLOWED"}, status=405)


def _not_found(session_id: str) -> HelixError:
    return NotFoundError(f"Session {session_id} not found")


async def _resume(request: HttpRequest, caller: Caller, session_id: str) -> HttpResponseBase:
    if not await session_access(caller, session_id):
        return HttpResponse(status=204)
    return to_django(await get_handler().handle_resume(session_id, request))


@csrf_exempt
async def stream_endpoint(request: HttpRequest, session_id: str) -> HttpResponseBase:
    """GET ``/api/chat/<id>/stream``: the default resume URL of ``useChat({resume: true})``."""
    if request.method != "GET":
        return JsonResponse({"error": "Method not allowed", "code": "METHOD_NOT_ALLOWED"}, status=405)
    try:
        return await _resume(request, await caller_of(request), session_id)
    except HelixError as exc:
        return _error(exc)


async def _delete(session_id: str) -> None:
    from chat.store import DjangoStateStore

    await DjangoStateStore().request_stop(session_id)
    await Session.objects.filter(pk=session_id).adelete()
    await get_stream_manager().delete_stream(session_id)


async def _owned(request: HttpRequest, session_id: str) -> Caller:
    caller, exists = await authorize(request, session_id)
    if not exists:
        raise _not_found(session_id)
    return caller


async def snapshot_view(request: HttpRequest, session_id: str) -> HttpResponseBase:
    """GET: the session's snapshot (messages, state, stream position and status)."""
    try:
        await _owned(request, session_id)
        include = request.GET.get("includePartialContent")
        snapshot = await get_handler().get_snapshot(session_id, None if include is None else include in ("1", "true"))
    except HelixError as exc:
        return _error(exc)
    if snapshot is None:
        return _error(_not_found(session_id))
    return JsonResponse(snapshot)


def _int_param(request: HttpRequest, name: str, default: int) -> int:
    raw = request.GET.get(name)
    if raw is None:
        return default
    if not raw.isdigit():
        raise ValidationError(f"{name} must be a non-negative integer")
    return int(raw)


async def messages_view(request: HttpRequest, session_id: str) -> HttpResponseBase:
    """GET ``?offset&limit``: a page of the session's UI messages."""
    try:
        await _owned(request, session_id)
        page = await get_handler().get_messages(
            session_id, _int_param(request, "offset", 0), _int_param(request, "limit", 50)
        )
    except HelixError as exc:
        return _error(exc)
    return JsonResponse(page)


@csrf_exempt
async def stop_view(request: HttpRequest, session_id: str) -> HttpResponseBase:
    """POST: interrupt the session's run at its next safe point."""
    if request.method != "POST":
        return JsonResponse({"error": "Method not allowed", "code": "METHOD_NOT_ALLOWED"}, status=405)
    try:
        caller = await _owned(request, session_id)
        if (failure := _csrf_failure(request, caller)) is not None:
            return failure
        from chat.store import DjangoStateStore

        stopped = await DjangoStateStore().request_stop(session_id)
    except HelixError as exc:
        return _error(exc)
    return JsonResponse({"stopped": stopped}, status=202 if stopped else 200)


# -- the caller's sessions (DRF) ----------------------------------------------------------------


class SessionSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")

    class Meta:
        model = Session
        fields = ("id", "title", "agent", "status", "createdAt", "updatedAt")


class HelixAccess(BasePermission):
    def has_permission(self, request: Any, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated) or bool(helix_settings.ALLOW_ANONYMOUS)


class SessionPagination(pagination.LimitOffsetPagination):
    default_limit = 20
    max_limit = 100


class SessionListView(generics.ListAPIView):  # type: ignore[type-arg]
    """GET: the caller's sessions, most recently active first."""

    serializer_class = SessionSerializer
    authentication_classes = (SessionAuthentication, TokenAuthentication)
    permission_classes = (HelixAccess,)
    pagination_class = SessionPagination

    def get_queryset(self) -> Any:
        user = self.request.user
        if user.is_authenticated:
            return Session.objects.filter(owner=user).order_by("-updated_at")
        ids = self.request.session.get("helix_sessions", [])
        return Session.objects.filter(owner__isnull=True, pk__in=ids).order_by("-updated_at")


async def agents_view(request: HttpRequest) -> HttpResponseBase:
    """GET: the registered agents a chat may name (``name``, ``description``)."""
    from workers.runtime.agents import agent_names, get_agent

    try:
        await caller_of(request)
    except HelixError as exc:
        return _error(exc)
    agents = [get_agent(name) for name in agent_names()]
    return JsonResponse([{"name": a.name, "description": a.description} for a in agents], safe=False)


def chat_page(request: HttpRequest) -> HttpResponse:
    """The demo chat page."""
    from django.shortcuts import render

    return render(request, "chat/chat.html")
