"""The embedded default as ``bin/run`` serves it (SQLite, migrated, Daphne, anonymous visitors):
the raw stream demo starts a stream, drops it and resumes it, and only its own browser reads it."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from http.cookies import SimpleCookie

import pytest
import redis

from tests.live import ROOT, serve_site


class Server:
    def __init__(self, port: int) -> None:
        self.port = port
        self.cookies: dict[str, str] = {}

    def _keep(self, response: http.client.HTTPResponse) -> None:
        for header in response.headers.get_all("Set-Cookie") or []:
            self.cookies.update({k: v.value for k, v in SimpleCookie(header).items()})

    @property
    def cookie_header(self) -> str:
        return "; ".join(f"{k}={v}" for k, v in self.cookies.items())

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def start_stream(self) -> str:
        conn = self.connect()
        conn.request("GET", "/demo/")
        page = conn.getresponse()
        assert page.status == 200
        assert b"Helix stream demo" in page.read()
        self._keep(page)
        conn.request(
            "POST", "/demo/streams", headers={"X-CSRFToken": self.cookies["csrftoken"], "Cookie": self.cookie_header}
        )
        response = conn.getresponse()
        assert response.status == 201
        self._keep(response)
        return str(json.loads(response.read())["eventsUrl"])

    def open_events(
        self, url: str, headers: dict[str, str] | None = None, *, cookies: bool = True
    ) -> http.client.HTTPResponse:
        conn = self.connect()
        conn.request("GET", url, headers={**({"Cookie": self.cookie_header} if cookies else {}), **(headers or {})})
        return conn.getresponse()


def read_events(response: http.client.HTTPResponse, limit: int | None = None) -> list[tuple[int | None, dict]]:  # type: ignore[type-arg]
    """Parse SSE events until the body ends or ``limit`` events were read."""
    events: list[tuple[int | None, dict]] = []  # type: ignore[type-arg]
    event_id, data = None, None
    while limit is None or len(events) < limit:
        line = response.readline()
        if not line:
            break
        line = line.rstrip(b"\r\n")
        if line.startswith(b"id: "):
            event_id = int(line[4:])
        elif line.startswith(b"data: "):
            data = json.loads(line[6:])
        elif not line and data is not None:
            events.append((event_id, data))
            event_id, data = None, None
    return events


@pytest.fixture(scope="module", params=["memory", "redis", "redis-uvicorn"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    backend, _, server_name = request.param.partition("-")
    database = f"sqlite:///{tempfile.mkdtemp(prefix='helix-embedded-')}/helix.sqlite3"
    # bin/run's environment: DEBUG, anonymous visitors, the embedded SQLite database, migrated.
    env = {
        "HELIX_STREAM_BACKEND": backend,
        "DATABASE_URL": database,
        "DJANGO_DEBUG": "1",
        "HELIX_ALLOW_ANONYMOUS": "1",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "helix_site.settings", **env},
        check=True,
    )
    if backend == "redis":
        env["REDIS_URL"] = request.getfixturevalue("redis_url")
    with serve_site(env, server_name or "daphne") as port:
        server = Server(port)
        server.backend = backend  # type: ignore[attr-defined]
        yield server


def test_stream_resumes_after_a_dropped_connection(server: Server) -> None:
    url = server.start_stream()
    first = server.open_events(url)
    assert first.status == 200
    assert first.headers["Content-Type"] == "text/event-stream"
    assert first.headers["Cache-Control"] == "no-cache"
    assert first.headers["X-Accel-Buffering"] == "no"
    assert first.headers["X-Vercel-AI-UI-Message-Stream"] == "v1"
    head = read_events(first, limit=5)
    first.close()  # the client drops the connection mid-stream
    assert [event_id for event_id, _ in head] == [1, 2, 3, 4, 5]
    resumed = server.open_events(url, {"Last-Event-ID": "5"})
    rest = read_events(resumed)
    chunks = [(event_id, data) for event_id, data in rest if data["type"] == "chunk"]
    assert [event_id for event_id, _ in chunks] == list(range(6, 6 + len(chunks)))
    assert all(data["sequence"] == event_id for event_id, data in chunks)
    assert rest[-1] == (None, {"type": "end"})
    text = "".join(d["chunk"]["delta"] for _, d in head + chunks if d["chunk"]["type"] == "text_delta")
    assert text.startswith("Helix writes every event") and text.endswith("nothing shown twice.")
    assert chunks[-1][1]["chunk"] == {
        "type": "custom",
        "agentId": chunks[-1][1]["chunk"]["agentId"],
        "agentType": "demo",
        "timestamp": chunks[-1][1]["chunk"]["timestamp"],
        "eventName": "demo_done",
        "data": {"words": len(text.split(" "))},
    }


def test_disconnect_stops_the_reader_but_not_the_producer(server: Server, request: pytest.FixtureRequest) -> None:
    url = server.start_stream()
    stream_id = url.split("/")[3]
    response = server.open_events(url)
    read_events(response, limit=2)
    if server.backend == "redis":  # type: ignore[attr-defined]
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
        channel = f"helix:stream:{{{stream_id}}}:n"
        assert client.pubsub_numsub(channel) == [(channel.encode(), 1)]
    response.close()
    if server.backend == "redis":  # type: ignore[attr-defined]
        deadline = time.monotonic() + 5
        while client.pubsub_numsub(channel) != [(channel.encode(), 0)]:
            assert time.monotonic() < deadline, "the reader kept its subscription after the client left"
            time.sleep(0.05)
    time.sleep(2.5)  # the producer went on without a reader and finished
    replay = read_events(server.open_events(url))
    assert replay[-1] == (None, {"type": "end"})
    assert [e for e, d in replay if d["type"] == "chunk"] == list(range(1, len(replay)))


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"Last-Event-ID": "-4"}, 400, "VALIDATION_ERROR"),
        ({"X-Resume-From-Sequence": "abc"}, 400, "VALIDATION_ERROR"),
    ],
)
def test_bad_resume_headers_get_a_typed_error(server: Server, headers: dict[str, str], status: int, code: str) -> None:
    url = server.start_stream()
    response = server.open_events(url, headers)
    assert response.status == status
    assert json.loads(response.read())["code"] == code


def test_unknown_stream_is_404(server: Server) -> None:
    server.start_stream()
    response = server.open_events("/demo/streams/nope/events")
    assert response.status == 404
    assert json.loads(response.read()) == {"error": "Stream not found: nope", "code": "STREAM_NOT_FOUND"}


def test_another_browser_cannot_read_a_demo_stream(server: Server) -> None:
    url = server.start_stream()
    response = server.open_events(url, cookies=False)  # no session cookie: a different visitor
    assert response.status == 404
    assert json.loads(response.read())["code"] == "STREAM_NOT_FOUND"
    stranger = Server(server.port)
    stranger.start_stream()  # a visitor with streams of its own still cannot read this one
    response = stranger.open_events(url)
    assert (response.status, json.loads(response.read())["code"]) == (404, "STREAM_NOT_FOUND")


def test_the_api_is_mounted_under_api_and_the_embedded_site_serves_its_pages(server: Server) -> None:
    conn = server.connect()
    conn.request("GET", "/api/schema")
    schema = conn.getresponse()
    assert schema.status == 200 and json.loads(schema.read())["servers"] == [{"url": "/api"}]
    conn.request("GET", "/")
    page = conn.getresponse()
    assert page.status == 200 and b"helix_site/demo-chat.js" in page.read()
