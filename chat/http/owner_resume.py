"""A resume by its session's owner with a token, answered without the pipeline's objects.

In a reconnect storm most of what a resume costs a server is not its reads but the objects the
request pipeline makes for it: DRF's request and view, an instance of every authentication,
permission and throttle class, Django's streaming response and its headers. When a site's
pipeline for a resume comes down to "the token's user owns the session" (Helix's
:class:`~chat.http.authentication.TokenAuthentication` first among its authentication classes,
no permission class but ``AllowAny`` or ``IsAuthenticated``, no throttle but
:class:`~chat.http.throttling.ChatPostThrottle`, which counts chat POSTs only, no API
versioning, and Helix's own resume views at the URLs of ``chat.urls``), :func:`resume_by_owner`
checks a GET that carries a token itself, in one database hop (:func:`~chat.state.db.together`)
and, where it can, one query where the pipeline makes two: the session's latest run, joined to
its owner and to the owner's token of that key (:class:`OwnedRuns`). The resumes of one hop read
theirs together, so a storm's hop reads its people's tokens, sessions and runs at once. A site
whose token model or user model that join cannot serve gets the pipeline's two reads, in the
same hop.

It answers only what the pipeline would allow: an active user's token, for a session that user
owns and that has a run. Anything else (no token, an unknown or inactive one, someone else's
session, no run yet, a malformed position, a caller at its cap of open streams) is left to the
pipeline, which answers it as it always has, with its error and its headers. So is a view the
site's URLconf wraps in a decorator, or makes with arguments to ``as_view()``. A refused request
thus makes its reads twice (the token, the run, a page read ahead): once here, once in the
pipeline.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Mapping
from types import MappingProxyType
from typing import Any, cast

from django.core.signals import setting_changed
from django.db import router
from django.db.models import OuterRef, Subquery
from django.http.response import HttpResponseBase
from rest_framework.permissions import AllowAny, IsAuthenticated

from chat.exceptions import TooManyStreamsError
from chat.http.authentication import OwnerRead, TokenAuthentication
from chat.http.open_streams import admit, counted, user_key
from chat.http.pipeline import helix_exception_handler, pipeline_classes
from chat.http.request_headers import HeadersOnly
from chat.http.throttling import ChatPostThrottle
from chat.http.views import ChatStreamView, ChatView, django_headers, to_django
from chat.models import ChatSession
from chat.services import get_handler
from chat.session_ids import canonical_session_id
from chat.state.compiled import CompiledRead
from chat.state.db import MOST_PER_HOP, ReadAhead, together
from chat.state.reads import LATEST_RUN_COLUMNS, current_run_and_owner, latest_runs, read_current_runs_ahead, run_info
from streams.exceptions import HelixError
from streams.sse import extract_resume_position

__all__ = ["OwnedRuns", "OwnerStream", "resume_by_owner"]

_VIEWS = (ChatView, ChatStreamView)
_PERMISSIONS = (AllowAny, IsAuthenticated)
#: Each view's ``Allow``, as DRF's pipeline sends it.
_allow: dict[type, str] = {}


class OwnerStream:
    """The streamed answer of a resume served here: its status, its headers as Django's response
    would list them, and its body (what :mod:`chat.http.asgi` sends of a response)."""

    streaming = True
    cookies: Mapping[str, Any] = MappingProxyType({})

    def __init__(self, status: int, headers: dict[str, str], body: AsyncIterator[bytes]) -> None:
        self.status_code, self._headers, self.helix_body = status, headers, body

    def items(self) -> Any:
        return self._headers.items()


class OwnedRuns:
    """A session's latest run, read only when the user of a token (by key) owns the session and is
    active: one query for :meth:`TokenAuthentication.owner_read` and
    :func:`~chat.state.reads.current_run_and_owner` together. ``tokens``: the token model, whose
    ``user`` is ``user``; ``relation``: its name for tokens in a query of users (``auth_token`` for
    DRF's)."""

    def __init__(self, tokens: Any, user: str, relation: str) -> None:
        key = f"owner__{relation}__key"
        columns = (*LATEST_RUN_COLUMNS, "owner_id", "owner__is_active")
        self.one = CompiledRead(
            ChatSession, lambda session, token: latest_runs([session]).filter(**{key: token}).values_list(*columns)[:2]
        )

        def many(*values: str) -> Any:
            # The hop's keys, then as many session keys (the order of their parameters in the SQL).
            # Each session looks its owner's token up among the keys itself, so that the query
            # starts from the sessions' keys: joined from the keys' side, a database may walk all
            # the sessions of an owner who has very many, to find the few asked for.
            keys, sessions = values[: len(values) // 2], values[len(values) // 2 :]
            owners = tokens.objects.filter(**{user: OuterRef("owner"), "key__in": keys}).values("key")[:1]
            return latest_runs(sessions).annotate(token=Subquery(owners)).values_list("pk", "token", *columns)

        self.many = CompiledRead(ChatSession, many)

    def owned_run(self, token: str, session: str) -> tuple[Any, Any] | None:
        """The latest run of session key ``session`` and its owner's pk, when the user whose token
        ``token`` is owns it and is active; else ``None`` (no such token, someone else's session,
        an inactive user, no run, no session, or two of the owner's tokens under that key)."""
        rows = self.one.rows(session, token)
        if len(rows) != 1:
            return None
        *run, owner_id, active = rows[0]
        return (run_info(run), owner_id) if active else None

    def read_ahead(self, pairs: list[tuple[str, str]]) -> None:
        """:meth:`owned_run` of every ``(token, session)`` pair read at once, one query per
        :data:`~chat.state.db.MOST_PER_HOP` pairs, and kept for the calls of this hop. A pair
        whose session came back with none of the keys has no row (its own read would ask for
        less). One whose session came back with another key reads for itself, as
        :meth:`TokenAuthentication.read_ahead` leaves a key: the database may match a key that
        differs from the one the row gives back, and an owner may have two tokens among the keys."""
        for start in range(0, len(pairs), MOST_PER_HOP):
            chunk = pairs[start : start + MOST_PER_HOP]
            sessions = list(dict.fromkeys(session for _, session in chunk))
            tokens = list(dict.fromkeys(token for token, _ in chunk))
            size = 1 << (max(len(sessions), len(tokens)) - 1).bit_length()  # a few compiled forms
            found: dict[tuple[str, str], list[tuple[Any, ...]]] = {pair: [] for pair in chunk}
            answered: set[str] = set()
            for session, token, *row in self.many.rows(*_padded(tokens, size), *_padded(sessions, size)):
                if token is None:  # none of the keys is its owner's (or it has no owner)
                    continue
                answered.add(session)
                rows = found.get((token, session))
                if rows is not None and len(rows) < 2:
                    rows.append(tuple(row))
            for (token, session), rows in found.items():
                if rows or session not in answered:
                    self.one.remember(rows, session, token)


def _padded(values: list[str], size: int) -> list[str]:
    return values + values[-1:] * (size - len(values))


#: Each owner read's :class:`OwnedRuns`, or ``None`` where its models cannot make the join.
_owned_runs: dict[OwnerRead, OwnedRuns | None] = {}


def owned_runs(owners: OwnerRead) -> OwnedRuns | None:
    """The :class:`OwnedRuns` of ``owners``' token model; ``None`` where the join would not ask
    what the token's own read asks: the owner's check needs more than a column of the user
    (``owners.by_key`` is ``None``), the tokens belong to another model than sessions' owners,
    the token model hides its name in queries, its key is not unique (the join sees the owner's
    tokens only), or its manager leaves tokens out (a join passes by managers)."""
    if owners in _owned_runs:
        return _owned_runs[owners]
    read: OwnedRuns | None = None
    if owners.by_key is not None:
        model: Any = owners.tokens.model
        field = owners.tokens.user_field
        relation = field.related_query_name()
        if (
            field.related_model is ChatSession._meta.get_field("owner").related_model
            and not relation.endswith("+")
            and model._meta.get_field("key").unique
            and not model.objects.all().query.where
        ):
            read = OwnedRuns(model, field.name, relation)
    _owned_runs[owners] = read
    return read


@functools.cache
def _pipeline_is_the_owners_token() -> bool:
    """Whether the site's pipeline allows a resume exactly when the token's user owns it."""
    authentication, permissions, throttles = pipeline_classes()
    return (
        bool(authentication)
        and authentication[0] is TokenAuthentication
        and all(permission in _PERMISSIONS for permission in permissions)
        and all(throttle is ChatPostThrottle for throttle in throttles)
    )


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting in ("HELIX", "REST_FRAMEWORK"):
        _pipeline_is_the_owners_token.cache_clear()


setting_changed.connect(_forget)


async def resume_by_owner(
    view: Callable[..., Any], scope: Mapping[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> HttpResponseBase | OwnerStream | None:
    """The answer to a resume GET (ASGI ``scope``) of ``view`` (a URLconf's view function, called
    with ``args`` and ``kwargs``) by its session's owner with a token; ``None`` when the pipeline
    is to answer it."""
    view_class = getattr(view, "helix_view", None)
    if (
        view_class not in _VIEWS
        or getattr(view, "helix_view_function", None) is not view  # wrapped in a decorator of the site's
        or getattr(view, "view_initkwargs", None)
        or args
        or kwargs.keys() != {"session_id"}  # a URL that passes the view more than chat.urls does
        or view_class.versioning_class is not None  # DRF copies the setting onto the class
        or not _pipeline_is_the_owners_token()
    ):
        return None
    request = HeadersOnly(scope)
    authenticator = TokenAuthentication()
    token_ahead = authenticator.read_ahead(cast(Any, request), owner=True)
    if token_ahead is None:
        return None
    try:
        position = extract_resume_position(request)
        session_id = canonical_session_id(kwargs["session_id"])
    except HelixError:
        return None
    key, owners, handler = cast(str, token_ahead.key), authenticator.owner_read(), get_handler()
    # One query reads the token, the user and the session on one database: with routers, each
    # model's reads go where its router sends them (a token revoked on the primary, say).
    owned = None if router.routers else owned_runs(owners)

    def owner_and_run() -> Any:
        # authenticate_credentials() and the resume views' session_access(), allowing only.
        if owned is not None:
            return owned.owned_run(key, session_id)
        user_id = owners.owner(key)
        if user_id is None:
            return None
        found = current_run_and_owner(session_id)
        if found is None or found[1] != user_id:
            return None
        return found[0], user_id

    aheads: tuple[ReadAhead, ...]
    if owned is not None:
        aheads = (ReadAhead(owned.read_ahead, (key, session_id)),)  # a canonical id is its own key
    else:
        aheads = (token_ahead, ReadAhead(read_current_runs_ahead, session_id))

    allow = _allow.get(view_class) or _allow.setdefault(view_class, ", ".join(view_class().allowed_methods))
    ahead = handler.read_ahead(session_id, position) if position is not None else None
    try:
        checked = await together(owner_and_run, *aheads)
        if checked is None:
            return None
        run, user_id = checked
        streams_of = user_key(user_id)
        try:
            admit(streams_of)
        except TooManyStreamsError:
            return None
        response = await handler.handle_resume(session_id, request, run=run, ahead=ahead, position=position)
    except Exception as exc:  # the database or the store failed: rendered as the pipeline renders it
        failed = helix_exception_handler(exc, {})
        if failed is None:
            raise
        failed["Allow"] = allow
        return failed
    finally:
        if ahead is not None:
            ahead.cancel()  # a page no one took; harmless once taken
    if not response.is_stream:
        answer = to_django(response)
        answer["Allow"] = allow
        return answer
    headers, content_type = django_headers(response)
    headers["Content-Type"] = content_type  # in the order Django's response lists them
    headers["Allow"] = allow
    return OwnerStream(response.status, headers, counted(streams_of, cast(AsyncIterator[bytes], response.body)))
