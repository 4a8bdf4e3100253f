"""The request body cap under uvicorn, which reads bodies for the application as they arrive:
Helix's ASGI router refuses one past the cap before any view, or authentication, runs."""

from __future__ import annotations

import json

import pytest

from tests.live import refuses_100_mb_uploads, serve_site, upload

pytestmark = pytest.mark.django_db(transaction=True)  # the server runs on the test database


async def test_a_100_mb_upload_is_refused_under_uvicorn_while_it_arrives(test_database: str) -> None:
    env = {"DATABASE_URL": test_database, "HELIX_STREAM_BACKEND": "memory"}
    with serve_site(env, "uvicorn") as port:
        await refuses_100_mb_uploads(port)
        small = json.dumps({"message": "hello"}).encode()
        within = (
            f"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(small)}\r\nConnection: close\r\n\r\n"
        )
        answer, _ = await upload(port, within + small.decode(), 0, b"")
        # A body within the cap reaches the site: its authentication answers (no one signed in).
        assert answer.split(b" ", 2)[1] in (b"401", b"403"), answer[:300]
