"""Fixtures of the chat tests that drive the real AI SDK client against a live server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tests.chat.ai_sdk.client import LIVE_HARNESS, ChatClient


@pytest.fixture(scope="module")
def live_client() -> Iterator[ChatClient]:
    """The real AI SDK chat client with the Helix helpers (``tests/js/live.mjs``)."""
    client = ChatClient(LIVE_HARNESS)
    yield client
    client.close()


@pytest.fixture
def token() -> str:
    """The API token of a new user."""
    user = User.objects.create_user(f"user-{uuid.uuid4().hex[:6]}", password="pw-live")
    return str(Token.objects.create(user=user).key)
