"""The HTTP surface of Helix chat, mounted wherever the site includes ``chat.urls``.

``chat``: POST starts a run in the session the body names (``id`` or ``sessionId``) or in a new
one; ``chat/<id>``: POST starts or continues a run and streams it, GET resumes it, DELETE removes
the session; ``chat/<id>/stream`` is the resume URL ``useChat({resume: true})`` calls;
``chat/<id>/snapshot``, ``chat/<id>/messages``, ``chat/<id>/stop`` and the session's feed
``chat/<id>/feed`` (its runs starting, pausing and ending, for every tab); ``sessions`` lists the
caller's sessions; ``agents`` the registered agents. Every request reaches its view through
Django's handler and the site's middleware, and every view runs the one pipeline of
:mod:`chat.http.pipeline`; views are coroutines that answer streams as Django's asynchronous
``StreamingHttpResponse``, and a client that disconnects closes its reader, not the run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from rest_framework import generics, pagination, serializers
from rest_framework.request import Request

from chat.ai_sdk.state import RunInfo
from chat.exceptions import PayloadTooLargeError, SessionNotFoundError
from chat.http.access import caller_of, owner_access, session_access
from chat.http.open_streams import CountedBody, Place, admit, caller_key
from chat.http.parsing import decode_json_body
from chat.http.pipeline import HelixAccessMixin, HelixAPIView
from chat.http.read_ahead import PageAhead
from chat.http.responses import HandlerResponse
from chat.models import ChatSession
from chat.services import get_handler
from chat.session_ids import body_session_id, canonical_session_id, new_session_id
from chat.state.cascade import delete_session
from chat.state.db import ReadAhead, db
from chat.state.reads import current_run_and_owner, read_current_runs_ahead
from chat.state.store import DjangoStateStore
from streams.conf import helix_settings
from streams.exceptions import HelixError, ValidationError
from streams.sse import extract_resume_position

__all__ = [
    "AgentsView",
    "ChatStreamView",
    "ChatView",
    "MessagesView",
    "NewChatView",
    "SessionFeedView",
    "SessionListView",
    "SnapshotView",
    "StopView",
    "django_headers",
    "to_django",
]


def to_django(response: HandlerResponse, place: Place | None = None) -> HttpResponseBase:
    """A :class:`HandlerResponse` as a Django response: streaming when its body is, holding
    ``place`` (one of its caller's open-stream places) until it ends; else ``place`` is given
    back now."""
    headers, content_type = django_headers(response)
    if response.is_stream:
        body = cast(AsyncIterator[bytes], response.body)
        if place is not None:
            body = CountedBody(place, body)
        return StreamingHttpResponse(body, status=response.status, content_type=content_type, headers=headers)
    if place is not None:
        place.release()
    return HttpResponse(response.body or "", status=response.status, content_type=content_type, headers=headers)


def django_headers(response: HandlerResponse) -> tuple[dict[str, str], str]:
    """The headers of ``response`` as a Django response is given them (no ``Connection``, for
    the server's to say), and its content type."""
    headers = {k: v for k, v in response.headers.items() if k.lower() not in ("connection", "content-type")}
    return headers, response.headers.get("content-type", "application/json")


def _json_body(request: Request) -> Any:
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
    return decode_json_body(raw)


def _read_ahead(request: HttpRequest, session_id: str | None, position: int | None) -> PageAhead | None:
    """The first page of a resume from ``position`` read ahead (:mod:`chat.http.read_ahead`): for
    a GET that names its position and carries credentials; ``None`` for any other request."""
    if session_id is None or position is None or request.method != "GET":
        return None
    if "HTTP_AUTHORIZATION" not in request.META and settings.SESSION_COOKIE_NAME not in request.COOKIES:
        return None
    try:
        session_id = canonical_session_id(session_id)
    except HelixError:  # the view answers it with its typed error
        return None
    return get_handler().read_ahead(session_id, position)


class _ResumeMixin(HelixAPIView):
    latest_run: RunInfo | None = None
    ahead: PageAhead | None = None
    #: A GET's resume position (``Last-Event-ID``), read once, or the error that it is malformed.
    position: int | HelixError | None = None

    async def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:  # type: ignore[override]
        if request.method in ("GET", "HEAD"):
            try:
                self.position = extract_resume_position(request)
            except HelixError as exc:  # a 400 from get(), once the caller is known
                self.position = exc
            else:
                # The stream's first page is read while the pipeline's database hop runs.
                self.ahead = _read_ahead(request, kwargs.get("session_id"), self.position)
        try:
            return await super().dispatch(request, *args, **kwargs)
        finally:
            if self.ahead is not None:
                self.ahead.cancel()  # a refused request, or a page no one took

    def reads_ahead_in_hop(self, request: Request, kwargs: dict[str, Any]) -> list[ReadAhead]:
        # The resumes of a storm read their runs and owners in one query per hop.
        aheads = super().reads_ahead_in_hop(request, kwargs)
        if request.method == "GET" and kwargs.get("session_id") is not None:
            aheads.append(ReadAhead(read_current_runs_ahead, kwargs["session_id"]))
        return aheads

    def session_access(self, request: Request, session_id: str) -> bool:
        if request.method != "GET":
            return super().session_access(request, session_id)
        # The owner and the run to stream in one query, in the database hop that authenticated
        # the caller: a reconnect storm is thousands of these.
        # Someone else's session answers as one that does not exist: nothing to resume.
        found = current_run_and_owner(session_id)
        try:
            if found is None:  # no run yet, or no session: the owner alone says
                return super().session_access(request, session_id)
            run, owner_id = found
            owned = owner_access(self.caller, session_id, owner_id)
        except SessionNotFoundError:
            return False
        self.latest_run = run
        return owned

    async def get(self, request: Request, session_id: str) -> HttpResponseBase:
        """Stream the current run from the client's position (204 when there is nothing)."""
        position = self.position
        if isinstance(position, HelixError):  # a malformed position is a 400, whatever the session
            raise position
        if not self.session_exists:
            return HttpResponse(status=204)
        place = admit(caller_key(self.caller))
        try:
            headers = request._request  # Django's request: its META, without DRF's attribute proxy
            response = await get_handler().handle_resume(
                session_id, headers, run=self.latest_run, ahead=self.ahead, position=position
            )
        except BaseException:
            place.release()
            raise
        return to_django(response, place)


async def _post_chat(view: HelixAPIView, request: Request, session_id: str | None) -> HttpResponseBase:
    """Start or continue a run in ``session_id`` (for ``None``: the session the body names, or a
    new one) and stream it; the session's id comes back in ``X-Session-Id``."""
    body = await db(_json_body)(request)
    caller = view.caller
    place = admit(caller_key(caller))  # before anything is stored
    try:
        if session_id is None:
            session_id = body_session_id(body) or new_session_id()
            await db(session_access)(caller, session_id)  # a session of someone else is a 404
        # The recorder compares the session's owner with the caller where it creates or takes
        # the session: whoever wins a race for a new id, the other caller gets a 404.
        owns = caller.user_id is not None or session_id in caller.anonymous_sessions
        response = await get_handler().handle_post(
            session_id,
            body,
            owner_id=caller.user_id,
            trusted=view.may_override,
            headers=request.headers,
            caller_owns=owns,
        )
        if response.status == 200 and caller.user_id is None:
            await caller.remember(session_id)
    except BaseException:
        place.release()
        raise
    return to_django(response, place)


class NewChatView(HelixAPIView):
    """POST ``chat``: a chat request whose session is in its body (or is new)."""

    throttled_post = True

    async def post(self, request: Request) -> HttpResponseBase:
        return await _post_chat(self, request, None)


class ChatView(_ResumeMixin):
    """POST: start or continue a run and stream it. GET: resume. DELETE: remove the session."""

    throttled_post = True

    async def post(self, request: Request, session_id: str) -> HttpResponseBase:
        return await _post_chat(self, request, session_id)

    async def delete(self, request: Request, session_id: str) -> HttpResponseBase:
        self.require_session()
        await DjangoStateStore().request_stop(session_id)
        await db(delete_session)(session_id)  # its stream goes with it
        return HttpResponse(status=204)


class ChatStreamView(_ResumeMixin):
    """GET ``chat/<id>/stream``: the default resume URL of ``useChat({resume: true})``."""


class SessionFeedView(HelixAPIView):
    """GET ``chat/<id>/feed``: the session's feed (:mod:`chat.http.feed`), one per tab: every
    tab of a session hears when a run starts, pauses, goes on, ends or fails, wherever it was
    started. It counts as one of the caller's open streams."""

    async def get(self, request: Request, session_id: str) -> HttpResponseBase:
        self.require_session()
        place = admit(caller_key(self.caller))
        return to_django(get_handler().session_feed(session_id), place)


class SnapshotView(HelixAPIView):
    """GET: the session's snapshot (messages, state, stream position and status)."""

    async def get(self, request: Request, session_id: str) -> HttpResponseBase:
        self.require_session()
        include = request.GET.get("includePartialContent")
        partial = None if include is None else include in ("1", "true")
        snapshot = await get_handler().get_snapshot(session_id, partial, request.GET.get("checkpointId"))
        if snapshot is None:
            raise SessionNotFoundError(f"Session {session_id} not found")
        return JsonResponse(snapshot)


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.GET.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or len(raw) > 9:
        raise ValidationError(f"{name} must be an integer from 0 to 999999999")
    return int(raw)


class MessagesView(HelixAPIView):
    """GET ``?offset&limit``: a page of the session's UI messages."""

    async def get(self, request: Request, session_id: str) -> HttpResponseBase:
        self.require_session()
        offset, limit = _int_param(request, "offset", 0), _int_param(request, "limit", 50)
        return JsonResponse(await get_handler().get_messages(session_id, offset, limit))


class StopView(HelixAPIView):
    """POST: interrupt the session's run at its next safe point."""

    async def post(self, request: Request, session_id: str) -> HttpResponseBase:
        self.require_session()
        stopped = await DjangoStateStore().request_stop(session_id)
        return JsonResponse({"stopped": stopped}, status=202 if stopped else 200)


class AgentsView(HelixAPIView):
    """GET: the registered agents a chat may name (``name``, ``description``)."""

    async def get(self, request: Request) -> HttpResponseBase:
        from workers.runtime.agents import agent_names, get_agent

        agents = [get_agent(name) for name in agent_names()]
        return JsonResponse([{"name": a.name, "description": a.description} for a in agents], safe=False)


# -- the caller's sessions (DRF's generic list view, same classes and errors) --------------------


class SessionSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")

    class Meta:
        model = ChatSession
        fields = ("id", "title", "agent", "status", "createdAt", "updatedAt")


class SessionPagination(pagination.LimitOffsetPagination):
    default_limit = 20
    max_limit = 100


class SessionListView(HelixAccessMixin, generics.ListAPIView):  # type: ignore[type-arg]
    """GET: the caller's sessions, most recently active first."""

    serializer_class = SessionSerializer
    pagination_class = SessionPagination

    def get_queryset(self) -> Any:
        caller = caller_of(self.request)
        if caller.user_id is not None:
            return ChatSession.objects.filter(owner_id=caller.user_id).order_by("-updated_at")
        return ChatSession.objects.filter(owner__isnull=True, pk__in=caller.anonymous_sessions).order_by("-updated_at")
