"""Fixtures of the chat tests that drive the real AI SDK client against a live server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from chat.state.compiled import CompiledRead
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


@pytest.fixture
def compiled_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[CompiledRead, int]]:
    """The compiled reads made from now on, each with its number of values, in order."""
    reads: list[tuple[CompiledRead, int]] = []
    real_read = CompiledRead._read

    def counted(self: CompiledRead, alias: str, values: tuple[str, ...]) -> list[tuple[Any, ...]]:
        reads.append((self, len(values)))
        return real_read(self, alias, values)

    monkeypatch.setattr(CompiledRead, "_read", counted)
    return reads
