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
"""

from __future__ import annotations

from typing import Any, cast

from django.db import models, router
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions

from chat.state.compiled import CompiledRead

__all__ = ["TokenAuthentication"]


class _TokenRead:
    """The compiled read of one token model: its columns and its user's, by key."""

    def __init__(self, model: type[models.Model]) -> None:
        self.user_field: Any = model._meta.get_field("user")
        self.model, self.user_model = model, cast(type[models.Model], self.user_field.related_model)
        self.names = [field.attname for field in model._meta.concrete_fields]
        self.user_names = [field.attname for field in self.user_model._meta.concrete_fields]
        columns = [*self.names, *(f"user__{name}" for name in self.user_names)]
        manager: Any = model.objects  # type: ignore[attr-defined]  # DRF's lookup, as DRF makes it
        self.read = CompiledRead(model, lambda key: manager.filter(key=key).values_list(*columns)[:2])

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


_reads: dict[type[models.Model], _TokenRead] = {}


class TokenAuthentication(authentication.TokenAuthentication):
    """``rest_framework.authentication.TokenAuthentication``, its lookup compiled once."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        model = self.get_model()
        read = _reads.get(model)
        if read is None:
            read = _reads[model] = _TokenRead(model)
        token = read.token(key)
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        return token.user, token
