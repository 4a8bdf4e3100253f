"""DRF's token authentication with its lookup compiled once.

:class:`TokenAuthentication` is ``rest_framework.authentication.TokenAuthentication``: the same
header, tokens, model (``model`` or ``get_model()``), errors and result (``request.user`` the
token's user, ``request.auth`` the token). Only the lookup differs: DRF builds the query of the
token and its user through the ORM on every request, which is most of what a resume costs a
server in a reconnect storm; here Django compiles it once per database
(:class:`~chat.state.compiled.CompiledRead`) and each request runs that SQL, and makes the two
model instances from the row as the ORM would. A site that authenticates its API with DRF
tokens lists this class instead of DRF's, in ``HELIX["AUTHENTICATION_CLASSES"]`` or its
``REST_FRAMEWORK`` defaults.

In a reconnect storm each client is a user with a token of their own. The requests of one
database hop (:func:`~chat.state.db.together`) then read their tokens in one query
(:meth:`TokenAuthentication.read_ahead`), not one query each.
"""

from __future__ import annotations

from typing import Any, cast

from django.db import models, router
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from chat.state.compiled import CompiledRead, read_ahead
from chat.state.db import MOST_PER_HOP, ReadAhead

__all__ = ["TokenAuthentication"]


class _ByKey:
    """Columns of a token model read by key, as DRF looks a token up: for one key, or for a
    database hop's keys at once."""

    def __init__(self, model: type[models.Model], columns: list[str] | tuple[str, ...]) -> None:
        manager: Any = model.objects  # type: ignore[attr-defined]  # DRF's lookup, as DRF makes it
        self.read = CompiledRead(model, lambda key: manager.filter(key=key).values_list(*columns)[:2])
        self.many = CompiledRead(model, lambda *keys: manager.filter(key__in=keys).values_list("key", *columns))

    def read_ahead(self, keys: list[str]) -> None:
        """The reads of ``keys`` at once, kept for the calls of this database hop
        (:func:`chat.state.compiled.shared_reads`). A key no token came back for reads for
        itself: a custom model's key may not be a string column, and a collation may match a key
        that differs in case, as DRF's own lookup would."""
        read_ahead(self.read, self.many, keys, per_query=MOST_PER_HOP, most=2, exact=False)


class _TokenRead(_ByKey):
    """The compiled read of one token model: its columns and its user's, by key."""

    def __init__(self, model: type[models.Model]) -> None:
        self.user_field: Any = model._meta.get_field("user")
        self.model, self.user_model = model, cast(type[models.Model], self.user_field.related_model)
        self.names = [field.attname for field in model._meta.concrete_fields]
        self.user_names = [field.attname for field in self.user_model._meta.concrete_fields]
        super().__init__(model, [*self.names, *(f"user__{name}" for name in self.user_names)])

    def token(self, key: str) -> Any:
        """The token of ``key`` with its user attached, or ``None`` (for no token, and for more
        than one: a custom model whose keys are not unique names nobody)."""
        rows = self.read.rows(key)
        if len(rows) != 1:
            return None
        row, split, alias = rows[0], len(self.names), router.db_for_read(self.model)
        token: Any = self.model.from_db(alias, self.names, row[:split])
        # The user is cached on the token as select_related would, but not the token on the user
        # as well: the two would refer to each other, and a reference cycle waits for the cyclic
        # collector instead of going when the request is done.
        self.user_field.set_cached_value(token, self.user_model.from_db(alias, self.user_names, row[split:]))
        return token


#: The read of each token model, and of each authentication class whose model DRF picks.
_reads: dict[Any, _TokenRead] = {}


class TokenAuthentication(authentication.TokenAuthentication):
    """``rest_framework.authentication.TokenAuthentication``, its lookup compiled once."""

    def read_ahead(self, request: Request) -> ReadAhead | None:
        """The read of the token ``request`` carries, to be made with the other requests' of its
        database hop; ``None`` when it carries none that :meth:`authenticate` would look up."""
        auth = authentication.get_authorization_header(request).split()
        if len(auth) != 2 or auth[0].lower() != self.keyword.lower().encode():
            return None
        try:
            key = auth[1].decode()
        except UnicodeError:
            return None
        return ReadAhead(self.token_read().read_ahead, key)

    def token_read(self) -> _TokenRead:
        """The compiled read of this class's token model: ``token(key)``, and ``read_ahead(keys)``."""
        # DRF's get_model() imports its Token model on every call: where it is DRF's own, the
        # class and its ``model`` name the read.
        named = type(self).get_model is authentication.TokenAuthentication.get_model
        read = _reads.get((type(self), self.model)) if named else None
        if read is None:
            model = self.get_model()
            read = _reads.get(model)
            if read is None:
                read = _reads[model] = _TokenRead(model)
            if named:
                _reads[(type(self), self.model)] = read
        return read

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        token = self.token_read().token(key)
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        return token.user, token
