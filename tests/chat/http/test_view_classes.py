"""A view's own DRF classes are the ones applied: a subclass's attribute, ``as_view()``'s
arguments, the site's versioning."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.models import ChatSession
from tests.chat.http.requests import login

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.chat.http.classes_urls")]


async def test_a_subclasss_and_as_views_permission_classes_are_applied() -> None:
    alice = await login("alice")
    user = await sync_to_async(lambda: alice.session["_auth_user_id"])()
    session = await sync_to_async(ChatSession.objects.create)(agent="chat", owner_id=user)
    assert (await alice.get("/api/agents")).status_code == 200
    for path in ("/staff/agents", f"/staff/chat/{session.pk}/snapshot"):
        response = await alice.get(path)
        assert (response.status_code, response.json()["code"]) == (403, "PERMISSION_DENIED"), path


async def test_accept_header_versioning_reads_the_version_the_client_asks_for() -> None:
    alice = await login("alice")
    good = await alice.get("/versioned/agents", headers={"Accept": "application/json; version=1.0"})
    assert good.status_code == 200
    bad = await alice.get("/versioned/agents", headers={"Accept": "application/json; version=9"})
    assert (bad.status_code, bad.json()["code"]) == (406, "VALIDATION_ERROR")


async def test_an_authenticators_own_refusal_is_not_reported_as_csrf() -> None:
    """Only a request that fails the CSRF check is told about CSRF tokens; the site's own
    ``PermissionDenied`` while authenticating keeps its words."""
    alice = await login("alice")
    assert (await alice.get("/office/agents")).status_code == 200
    refused = await alice.get("/office/agents", headers={"X-After-Hours": "1"})
    assert (refused.status_code, refused.json()) == (
        403,
        {"error": "Chat is closed after hours", "code": "PERMISSION_DENIED"},
    )
