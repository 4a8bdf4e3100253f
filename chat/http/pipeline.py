"""One request pipeline for every chat endpoint: DRF's, with an async ``dispatch``.

Every Helix request reaches its view through Django's handler and the site's middleware.
:class:`HelixAPIView` is DRF's ``APIView`` with an async ``dispatch`` that runs DRF's own steps:
method dispatch (405 with ``Allow``), ``initial()`` (content negotiation, versioning,
authentication, permissions, throttling), CSRF exactly as DRF's ``SessionAuthentication`` enforces
it (and for anonymous visitors, whose cookie is their identity), and one exception handler that
renders every :class:`~streams.exceptions.HelixError` and DRF error as ``{"error", "code"}``.

The view's classes are DRF's attributes. Unless a view sets its own (a subclass, or arguments to
``as_view()``), they come from ``HELIX`` and, where that says nothing, the site's
``REST_FRAMEWORK`` defaults (for throttles, Helix's chat POST throttle), read when the request is
made. ``HelixCaller`` is always applied
after the permission classes.

``initial()`` and the ownership check of the session in the URL run together in one call on a
database thread, in one hop with the other requests of that moment
(:func:`~chat.state.db.together`: a reconnect storm is thousands of them); the handlers themselves
are coroutines. The views are never wrapped in ``ATOMIC_REQUESTS``' transaction (Django refuses
that for async views): what must be atomic is, in its own transaction.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError, connections, transaction
from django.http import Http404, HttpRequest, JsonResponse
from django.http.request import RawPostDataException
from django.http.response import HttpResponseBase
from django.utils.module_loading import import_string
from rest_framework import exceptions
from rest_framework.authentication import CSRFCheck, SessionAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from chat.exceptions import (
    AuthenticationFailedError,
    CsrfFailedError,
    MethodNotAllowedError,
    NotAuthenticatedError,
    PermissionDeniedError,
    RateLimitedError,
    SessionNotFoundError,
)
from chat.http.access import Caller, HelixCaller, caller_of, session_access
from chat.http.authentication import TokenAuthentication
from chat.session_ids import canonical_session_id
from chat.state.db import ReadAhead, together
from streams.conf import helix_settings
from streams.exceptions import HelixError, ValidationError
from workers.exceptions import DatabaseUnavailableError

__all__ = [
    "HelixAPIView",
    "HelixAccessMixin",
    "error_json",
    "helix_exception_handler",
]

logger = logging.getLogger(__name__)

_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})

#: What a browser's request refused for its CSRF token should do instead.
CSRF_HINT = (
    "Send the page's CSRF token in the X-CSRFToken header: the Helix helpers read it from the "
    "csrftoken cookie, or, where the site keeps it from JavaScript (CSRF_COOKIE_HTTPONLY, "
    'CSRF_USE_SESSIONS), from <meta name="csrf-token"> ({% load helix %}{% helix_csrf_meta %}) '
    "or their csrfToken option"
)


def _classes(setting: Any, default: Sequence[Any]) -> list[Any]:
    names = default if setting is None else setting
    key = tuple(names)
    classes = _imported.get(key)
    if classes is None:
        classes = _imported[key] = [import_string(name) if isinstance(name, str) else name for name in names]
    return classes


#: The classes of each list of dotted paths the settings name, imported once: every request asks.
_imported: dict[tuple[Any, ...], list[Any]] = {}

#: The methods each view class answers (``Allow``), by class and its ``http_method_names``.
_allowed: dict[tuple[type, tuple[str, ...]], tuple[str, ...]] = {}


def error_json(error: HelixError, headers: dict[str, str] | None = None) -> JsonResponse:
    """The JSON error response of ``error``: ``{"error", "code"}`` with its status."""
    response = JsonResponse(error.as_dict(), status=error.status_code, headers=headers)
    if error.retry_after is not None:
        response["Retry-After"] = str(error.retry_after)
    return response


def _as_helix_error(exc: Exception) -> HelixError | None:
    if isinstance(exc, HelixError):
        return exc
    if isinstance(exc, (OperationalError, InterfaceError)):  # a sync view's query: as db() does
        logger.warning("the database failed a request: %s: %s", type(exc).__name__, exc)
        return DatabaseUnavailableError()
    if isinstance(exc, Http404):
        return SessionNotFoundError(str(exc) or "Not found")
    if isinstance(exc, exceptions.Throttled):
        wait = getattr(exc, "wait", None)
        wait = int(wait + 0.999) if wait is not None else 60
        return RateLimitedError(max(wait, 1), f"Too many chat requests; retry in {max(wait, 1)} s")
    if isinstance(exc, exceptions.NotAuthenticated):
        return NotAuthenticatedError(str(exc.detail))
    if isinstance(exc, exceptions.AuthenticationFailed):
        return AuthenticationFailedError(str(exc.detail))
    if isinstance(exc, exceptions.PermissionDenied):
        return PermissionDeniedError(str(exc.detail))
    if isinstance(exc, exceptions.MethodNotAllowed):
        return MethodNotAllowedError(str(exc.detail))
    if isinstance(exc, exceptions.APIException):
        error = ValidationError(str(exc.detail))
        error.status_code = exc.status_code
        return error
    return None


def helix_exception_handler(exc: Exception, context: dict[str, Any]) -> JsonResponse | None:
    """DRF's ``EXCEPTION_HANDLER`` for Helix views: every known error as ``{"error", "code"}``;
    ``None`` (re-raise) for anything else."""
    error = _as_helix_error(exc)
    if error is None:
        return None
    response = error_json(error)
    if isinstance(exc, exceptions.APIException):
        if exc.status_code != error.status_code:  # DRF's 403 for an unauthenticated caller without a scheme
            response.status_code = exc.status_code
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            response["WWW-Authenticate"] = auth_header
    return response


class _FromSettings:
    """A view's class list that defaults to a ``HELIX`` setting, else to ``REST_FRAMEWORK``'s:
    read when a request asks, so that a view's own list (a subclass's attribute, or an
    ``as_view()`` argument, which DRF sets on the instance) replaces it as DRF's would."""

    def __init__(self, setting: str, default: str | list[str]) -> None:
        self.setting, self.default = setting, default

    def __get__(self, instance: Any, owner: Any = None) -> list[Any]:
        default = self.default if isinstance(self.default, list) else getattr(api_settings, self.default)
        return _classes(getattr(helix_settings, self.setting), default)


class HelixAccessMixin:
    """The classes and the error format of every Helix view, for DRF's sync views too."""

    authentication_classes: Any = _FromSettings("AUTHENTICATION_CLASSES", "DEFAULT_AUTHENTICATION_CLASSES")
    permission_classes: Any = _FromSettings("PERMISSION_CLASSES", "DEFAULT_PERMISSION_CLASSES")
    #: Unless set, Helix's chat POST throttle only (not the site's default throttles).
    throttle_classes: Any = _FromSettings("THROTTLE_CLASSES", ["chat.http.throttling.ChatPostThrottle"])
    renderer_classes: Any = (JSONRenderer,)
    #: Left out of the site's own OpenAPI schema (DRF's or drf-spectacular's): Helix describes its
    #: API in its own, at ``schema`` under its prefix (:mod:`chat.openapi`).
    schema: Any = None
    #: The endpoint counts against ``ChatPostThrottle`` (chat POSTs only).
    throttled_post = False

    def get_permissions(self) -> list[BasePermission]:
        return [*super().get_permissions(), HelixCaller()]  # type: ignore[misc]

    def get_exception_handler(self) -> Any:
        return helix_exception_handler

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # Errors are JSON whatever the client accepts; a stream client accepts text/event-stream.
        return super().perform_content_negotiation(request, force=True)  # type: ignore[misc]

    def perform_authentication(self, request: Request) -> None:
        """Resolve the user; an anonymous visitor's unsafe request must carry a CSRF token too
        (its cookie is its identity), as ``SessionAuthentication`` demands of a signed-in one.

        ``SessionAuthentication`` refuses a missing or wrong token with ``PermissionDenied``: that
        refusal is answered ``CSRF_FAILED`` with what to do, when the request does fail Django's
        CSRF check; any other refusal of an authenticator stays ``PERMISSION_DENIED``."""
        if request.method in _UNSAFE:
            _keep_body(request._request)
        try:
            user = request.user
        except exceptions.PermissionDenied as exc:
            session_auth = any(isinstance(a, SessionAuthentication) for a in request.authenticators or ())
            if session_auth and _csrf_failure(request._request) is not None:
                raise CsrfFailedError(f"{exc.detail}. {CSRF_HINT}") from exc
            raise
        if request.method in _UNSAFE and (user is None or not user.is_authenticated):
            django_request = request._request
            if getattr(django_request, "COOKIES", None):
                reason = _csrf_failure(django_request)
                if reason:
                    raise CsrfFailedError(f"CSRF Failed: {reason}. {CSRF_HINT}")


def _keep_body(request: HttpRequest) -> None:
    """The body kept in memory before the authenticators run (Django's ASGI handler has already
    read it in full). DRF's ``SessionAuthentication`` reads ``request.POST`` for its CSRF check,
    which before DRF 3.17 parses the body from the raw stream and leaves nothing for the view to
    read (``RawPostDataException``); kept, every later read has it."""
    try:
        request.body  # noqa: B018  (cached on the request by the read)
    except (RequestDataTooBig, RawPostDataException):  # the view answers it with its typed error
        pass


def _csrf_failure(request: HttpRequest) -> str | None:
    """Why Django's CSRF check refuses ``request``, or ``None`` when it passes."""
    check = CSRFCheck(lambda _: None)  # type: ignore[arg-type]
    check.process_request(request)
    reason: Any = check.process_view(request, None, (), {})  # type: ignore[arg-type]
    return str(reason) if reason else None  # DRF's CSRFCheck answers a refusal with its reason


class HelixAPIView(HelixAccessMixin, APIView):
    """An async DRF view: the pipeline runs on a database thread, the handler on the event loop.

    A view whose URL names a ``session_id`` gets ``self.caller`` and ``self.session_exists``
    (``True`` when the caller owns the session, ``False`` when there is none; a session of
    someone else is a 404 before the handler runs).
    """

    caller: Caller
    session_exists: bool = False
    #: The request passes ``HELIX["OVERRIDE_PERMISSION_CLASSES"]``: it may replace the session's
    #: history and state (the seeds' ``messages`` / ``state``). Nobody, unless the site lists some.
    may_override: bool = False

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        view = super().as_view(**initkwargs)
        # Django refuses to wrap an async view in ATOMIC_REQUESTS' transaction (a RuntimeError on
        # every request): a stream cannot hold one open anyway. Helix's writes are atomic each.
        for alias in connections:
            view = transaction.non_atomic_requests(using=alias)(view)
        return view

    def _prepare(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.initial(request, *args, **kwargs)
        self.caller = caller_of(request)
        if self.throttled_post and request.method == "POST":
            overriders = [cls() for cls in _classes(helix_settings.OVERRIDE_PERMISSION_CLASSES, ())]
            self.may_override = bool(overriders) and all(p.has_permission(request, self) for p in overriders)
        session_id = kwargs.get("session_id")
        if session_id is not None:
            self.session_exists = self.session_access(request, session_id)

    def reads_ahead_in_hop(self, request: Request, kwargs: dict[str, Any]) -> list[ReadAhead]:
        """What :meth:`_prepare` will read that the other requests of its hop read too, to be
        read for all of them at once: the caller's token, when an authenticator can say which
        (:meth:`chat.http.authentication.TokenAuthentication.read_ahead`)."""
        for authenticator in request.authenticators or ():
            if isinstance(authenticator, TokenAuthentication):
                ahead = authenticator.read_ahead(request)
                if ahead is not None:
                    return [ahead]
        return []

    def session_access(self, request: Request, session_id: str) -> bool:
        """Whether the session in the URL exists and the caller owns it (someone else's is a
        :class:`SessionNotFoundError`); on the database thread of :meth:`_prepare`."""
        return session_access(self.caller, session_id)

    async def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:  # type: ignore[override]
        self.args, self.kwargs = args, kwargs
        drf_request = self.initialize_request(request, *args, **kwargs)
        self.request = drf_request
        self.headers = self.default_response_headers
        try:
            method = (drf_request.method or "").lower()
            handler = getattr(self, method, None) if method in self.http_method_names else None
            if handler is None or method == "options":
                raise exceptions.MethodNotAllowed(drf_request.method or "")
            if kwargs.get("session_id") is not None:  # one spelling from here on (see chat.session_ids)
                kwargs["session_id"] = canonical_session_id(kwargs["session_id"])
            prepare = functools.partial(self._prepare, drf_request, *args, **kwargs)
            await together(prepare, *self.reads_ahead_in_hop(drf_request, kwargs))
            response = await handler(drf_request, *args, **kwargs)
        except Exception as exc:
            response = self.handle_exception(exc)
        try:
            return self.finalize_response(drf_request, response, *args, **kwargs)
        finally:
            # DRF's request refers to itself and to the view (its parser context), and Django's
            # View.setup() binds ``head`` to the view's own ``get``: unlinked, the request, the
            # view, the user and the rest go as soon as the request is done, instead of waiting as
            # garbage for the cyclic collector, which walks them with every collection until then.
            drf_request.parser_context.clear()
            self.__dict__.pop("head", None)

    async def options(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponseBase:  # type: ignore[override]
        raise exceptions.MethodNotAllowed("OPTIONS")

    def _allowed_methods(self) -> list[str]:
        # DRF asks on every request (for ``Allow``): the answer is the class's, made once. HEAD
        # where there is a GET, as Django's View.setup() gives every instance.
        cls = type(self)
        key = (cls, tuple(self.http_method_names))
        methods = _allowed.get(key)
        if methods is None:
            methods = _allowed[key] = tuple(
                m.upper()
                for m in self.http_method_names
                if m != "options" and (hasattr(cls, m) or (m == "head" and hasattr(cls, "get")))
            )
        return list(methods)

    def require_session(self) -> None:
        """404 unless the session in the URL exists (and the caller owns it)."""
        if not self.session_exists:
            raise SessionNotFoundError(f"Session {self.kwargs.get('session_id')} not found")
