"""Helix's token authentication (chat.http.authentication) is DRF's: the same user, token and
errors for every header, from one compiled query."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token, TokenProxy
from rest_framework.test import APIRequestFactory

from chat.http.authentication import TokenAuthentication
from chat.state.compiled import shared_reads

pytestmark = pytest.mark.django_db


def outcome(auth: authentication.BaseAuthentication, header: str | None) -> Any:
    """What ``auth`` makes of a request with ``header``: ``(user fields, token key)``, ``None``,
    or the error it raises (class, message, status)."""
    factory = APIRequestFactory()
    request = factory.get("/api/chat/x") if header is None else factory.get("/api/chat/x", HTTP_AUTHORIZATION=header)
    try:
        found = auth.authenticate(request)
    except exceptions.APIException as exc:
        return type(exc), str(exc.detail), exc.status_code
    if found is None:
        return None
    user, token = found
    fields = {field.attname: getattr(user, field.attname) for field in User._meta.concrete_fields}
    return fields, type(user), token.key, token.user_id, token.created


def test_every_header_gets_what_drf_gives_it() -> None:
    active = User.objects.create_user("active", password="pw", email="a@example.com", first_name="Ann")
    active_token = Token.objects.create(user=active)
    inactive = User.objects.create_user("inactive", password="pw", is_active=False)
    inactive_token = Token.objects.create(user=inactive)
    active.refresh_from_db()  # last_login and date_joined as the database keeps them
    headers = [
        None,
        f"Token {active_token.key}",
        f"token {active_token.key}",
        f"Token {inactive_token.key}",
        "Token no-such-key",
        "Token",
        "Token a b",
        f"Bearer {active_token.key}",
        f"Token {active_token.key[:-1]}",
    ]
    ours, drf = TokenAuthentication(), authentication.TokenAuthentication()
    for header in headers:
        assert outcome(ours, header) == outcome(drf, header), header
    fields, user_type, key, _, _ = outcome(ours, f"Token {active_token.key}")
    assert (user_type, key, fields["email"], fields["first_name"]) == (User, active_token.key, "a@example.com", "Ann")
    assert outcome(ours, f"Token {inactive_token.key}")[1] == "User inactive or deleted."


def test_a_request_is_one_query_and_the_user_comes_with_it(django_assert_num_queries: Any) -> None:
    user = User.objects.create_user("someone", password="pw")
    token = Token.objects.create(user=user)
    request = APIRequestFactory().get("/api/chat/x", HTTP_AUTHORIZATION=f"Token {token.key}")
    TokenAuthentication().authenticate(request)  # compiled on first use
    with django_assert_num_queries(1):
        found = TokenAuthentication().authenticate(request)
        assert found is not None
        found_user, found_token = found
        assert found_user.is_authenticated and found_user.username == "someone"
        assert found_token.user is found_user and found_token.pk == token.pk
    found_user.first_name = "Changed"
    found_user.save(update_fields=["first_name"])  # a real model instance, bound to its row
    user.refresh_from_db()
    assert user.first_name == "Changed"


def test_a_subclass_keeps_drfs_model_and_keyword_hooks() -> None:
    """A subclass naming its token ``model`` and ``keyword``, as DRF documents, gets that model."""

    class Strict(TokenAuthentication):
        model = TokenProxy
        keyword = "Bearer"

    user = User.objects.create_user("bearer", password="pw")
    token = Token.objects.create(user=user)
    found = Strict().authenticate(APIRequestFactory().get("/x", HTTP_AUTHORIZATION=f"Bearer {token.key}"))
    assert found is not None and found[0].pk == user.pk and type(found[1]) is TokenProxy
    assert Strict().authenticate(APIRequestFactory().get("/x", HTTP_AUTHORIZATION=f"Token {token.key}")) is None


def test_the_tokens_of_a_hop_are_read_in_one_query(django_assert_num_queries: Any) -> None:
    """In a database hop (chat.state.db.together) the requests' tokens are read ahead together,
    and each request then gets from that read what its own query would have given it."""
    users = [User.objects.create_user(f"user{n}", password="pw", is_active=n != 2) for n in range(4)]
    tokens = [Token.objects.create(user=user) for user in users]
    for user in users:
        user.refresh_from_db()
    headers = [*(f"Token {token.key}" for token in tokens), "Token no-such-key", f"token {tokens[0].key}"]
    factory, ours = APIRequestFactory(), TokenAuthentication()
    expected = [outcome(authentication.TokenAuthentication(), header) for header in headers]
    aheads = [ours.read_ahead(factory.get("/x", HTTP_AUTHORIZATION=header)) for header in headers]
    assert all(ahead is not None for ahead in aheads)
    with shared_reads():
        with django_assert_num_queries(1):
            aheads[0].read([ahead.key for ahead in aheads if ahead is not None])  # type: ignore[union-attr]
        with django_assert_num_queries(1):  # the unknown key's own: a key no row came back for reads for itself
            found = [outcome(ours, header) for header in headers]
    assert found == expected


def test_a_request_without_a_token_of_this_keyword_reads_nothing_ahead() -> None:
    factory, ours = APIRequestFactory(), TokenAuthentication()
    for header in [None, "Token", "Token a b", "Bearer abc", "Token \xe9t\xe9"]:
        request = factory.get("/x") if header is None else factory.get("/x", HTTP_AUTHORIZATION=header)
        assert ours.read_ahead(request) is None, header
