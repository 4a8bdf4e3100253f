"""Hostile requests against a running site, as an attacker sends them: two users, races, forged
ids, hostile bodies and headers, on Daphne and on uvicorn, with the streams in Redis and the
database on PostgreSQL (the suite's). Every case says what must hold; none of them may change
what the server stored."""

from __future__ import annotations

import concurrent.futures
import json
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from chat.models import ChatSession, Message, Run
from tests.live import SERVERS, http_request, serve_site
from tooling.servers import GUNICORN_WORKERS

pytestmark = pytest.mark.django_db(transaction=True)

CAP = 2  # open streams per caller
RATE = 3  # anonymous chat POSTs per minute


@dataclass
class Site:
    port: int
    redis_url: str
    processes: int = 1

    def request(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: bytes | dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        cookie: str | None = None,
        source: str = "127.0.0.1",
    ) -> tuple[int, dict[str, str], bytes]:
        headers = dict(headers or {})
        if token:
            headers["Authorization"] = f"Token {token}"
        if cookie:
            headers["Cookie"] = cookie
        return http_request(self.port, method, path, body=body, headers=headers, source=source)

    def forget_throttles(self) -> None:
        """Drop the chat POST counters (anonymous callers here all share one address)."""
        client = redis.Redis.from_url(self.redis_url)
        for key in client.scan_iter("*throttle*"):
            client.delete(key)


@pytest.fixture(scope="module", params=SERVERS)
def site(request: pytest.FixtureRequest, test_database: str, redis_url: str) -> Iterator[Site]:
    env = {
        "HELIX_STREAM_BACKEND": "redis",
        "REDIS_URL": redis_url,
        "DATABASE_URL": test_database,
        "HELIX_EXECUTOR": "inprocess",
        "HELIX_ALLOW_ANONYMOUS": "1",
        "HELIX_SCRIPTED_DELAY_MS": "30",
        "HELIX_MAX_STREAMS_PER_CALLER": str(CAP),
        "HELIX_CHAT_RATE": f"{RATE}/minute",
    }
    with serve_site(env, request.param) as port:
        yield Site(port, redis_url, GUNICORN_WORKERS if request.param == "gunicorn" else 1)


def user_token() -> tuple[User, str]:
    user = User.objects.create_user(f"u-{uuid.uuid4().hex[:8]}", password="pw-hostile")
    return user, Token.objects.create(user=user).key


def code(answer: tuple[int, dict[str, str], bytes]) -> tuple[int, str]:
    status, _, body = answer
    return status, json.loads(body)["code"]


def test_two_users_racing_for_a_new_id_never_share_it(site: Site) -> None:
    for _ in range(6):
        (alice, alice_token), (bob, bob_token) = user_token(), user_token()  # fresh: the rate limit is per user
        session_id = str(uuid.uuid4())
        posts = [(alice_token, "Alice asks"), (bob_token, "Bob asks")]

        def send(post: tuple[str, str], session_id: str = session_id) -> tuple[int, dict[str, str], bytes]:
            return site.request(
                "POST",
                f"/api/chat/{session_id}",
                token=post[0],
                body={"message": post[1]},
                headers={"X-Resume-From-Sequence": "0"},  # the helpers' reattach: the loser must not join
            )

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(send, posts))
        statuses = sorted(status for status, _, _ in answers)
        assert statuses == [200, 404], statuses
        winner = 0 if answers[0][0] == 200 else 1
        assert code(answers[1 - winner]) == (404, "SESSION_NOT_FOUND")
        session = ChatSession.objects.get(pk=session_id)
        assert session.owner_id == (alice, bob)[winner].pk
        stored = list(Message.objects.filter(session=session, role="user").values_list("content", flat=True))
        assert stored == [posts[winner][1]]


def test_someone_elses_session_answers_as_an_unknown_one(site: Site) -> None:
    (_, alice), (_, mallory) = user_token(), user_token()
    session_id = str(uuid.uuid4())
    status, _, _ = site.request("POST", f"/api/chat/{session_id}", token=alice, body={"message": "Mine"})
    assert status == 200
    unknown = str(uuid.uuid4())
    for method, suffix in [
        ("GET", ""),
        ("GET", "/stream"),
        ("GET", "/snapshot"),
        ("GET", "/messages"),
        ("POST", "/stop"),
        ("DELETE", ""),
        ("POST", ""),
    ]:
        body = {"message": "Steal"} if method == "POST" and suffix == "" else None
        foreign = site.request(method, f"/api/chat/{session_id}{suffix}", token=mallory, body=body)
        nobody = site.request(method, f"/api/chat/{unknown}{suffix}", token=mallory, body=body)
        if method == "POST" and suffix == "":
            assert code(foreign) == (404, "SESSION_NOT_FOUND")  # the unknown id is simply created
            continue
        assert (foreign[0], foreign[2].replace(session_id.encode(), b"<id>")) == (
            nobody[0],
            nobody[2].replace(unknown.encode(), b"<id>"),
        ), (method, suffix)
    assert Message.objects.filter(session_id=session_id, content="Steal").count() == 0


@pytest.mark.parametrize(
    "body",
    [
        b'{"message": "caf\xc3"}',
        b'{"message": "\xff"}',
        json.dumps({"message": "hi\u0000"}).encode(),
        json.dumps(
            {"messages": [{"id": "u" * 101, "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
        ).encode(),
        json.dumps(
            {"messages": [{"id": "u1\u0000", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
        ).encode(),
    ],
)
def test_bodies_no_column_can_hold_are_a_typed_400_that_stores_nothing(site: Site, body: bytes) -> None:
    _, token = user_token()
    session_id = str(uuid.uuid4())
    answer = site.request("POST", f"/api/chat/{session_id}", token=token, body=body)
    assert code(answer) == (400, "VALIDATION_ERROR"), answer
    assert not ChatSession.objects.filter(pk=session_id).exists() and not Run.objects.exists()


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "POST", "DELETE"])
def test_a_body_past_the_cap_is_refused_before_it_is_read(site: Site, method: str) -> None:
    """100 MB announced, a few bytes sent: the answer comes at once, unauthenticated."""
    with socket.create_connection(("127.0.0.1", site.port), timeout=10) as sock:
        head = f"{method} /api/agents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000000\r\n\r\n"
        sock.sendall(head.encode() + b"x" * 1000)
        started, answer = time.monotonic(), b""
        while b"\r\n\r\n" not in answer:
            piece = sock.recv(4096)
            if not piece:
                break
            answer += piece
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert time.monotonic() - started < 5


def test_a_chunked_body_past_the_cap_is_refused_while_it_arrives(site: Site) -> None:
    with socket.create_connection(("127.0.0.1", site.port), timeout=10) as sock:
        sock.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = b"x" * 65536
        answer = b""
        try:
            for _ in range(200):  # up to 13 MB, past every cap
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        except OSError:  # refused and closed while we were sending: what we want
            pass
        sock.settimeout(5)
        try:
            while b"\r\n\r\n" not in answer and (chunk := sock.recv(4096)):
                answer += chunk
        except OSError:
            pass
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_a_forwarded_for_header_buys_no_anonymous_requests(site: Site) -> None:
    """From an address no proxy setting trusts (uvicorn trusts 127.0.0.1's forwarded headers, as
    from a proxy on the same host), each request naming another client."""
    site.forget_throttles()
    statuses = [
        site.request(
            "POST", "/api/chat", body={"message": "hi"}, headers={"X-Forwarded-For": f"10.0.0.{n}"}, source="127.0.0.2"
        )[0]
        for n in range(RATE + 2)
    ]
    site.forget_throttles()
    assert statuses == [200] * RATE + [429, 429], statuses


def test_the_open_stream_cap_holds_against_concurrent_requests(site: Site) -> None:
    _, token = user_token()
    session_id = str(uuid.uuid4())
    with socket.create_connection(("127.0.0.1", site.port), timeout=10) as live:
        body = json.dumps({"message": "Tell me a long story"}).encode()
        live.sendall(
            f"POST /api/chat/{session_id} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert live.recv(4096).startswith(b"HTTP/1.1 200")  # the run streams: one place taken
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            statuses = list(
                pool.map(lambda _: site.request("GET", f"/api/chat/{session_id}/snapshot", token=token)[0], range(6))
            )
        assert statuses == [200] * 6  # JSON answers hold no place
        sockets = [socket.create_connection(("127.0.0.1", site.port), timeout=10) for _ in range(6)]
        try:
            for sock in sockets:
                sock.sendall(
                    f"GET /api/chat/{session_id}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    f"Authorization: Token {token}\r\n\r\n".encode()
                )
            heads = [sock.recv(64) for sock in sockets]
        finally:
            for sock in sockets:
                sock.close()
    opened = [h for h in heads if h.startswith(b"HTTP/1.1 200")]
    refused = [h for h in heads if h.startswith(b"HTTP/1.1 429")]
    assert len(opened) + len(refused) == 6, heads
    # The cap is per process: one process holds the POST's place and one more; each other process
    # of the server (gunicorn's) holds up to CAP.
    assert CAP - 1 <= len(opened) <= CAP - 1 + (site.processes - 1) * CAP, heads


def test_a_resume_for_a_host_the_site_does_not_serve_is_refused(site: Site) -> None:
    _, token = user_token()
    answer = site.request("GET", f"/api/chat/{uuid.uuid4()}/stream", token=token, headers={"Host": "evil.example"})
    assert answer[0] == 400
    status, headers, _ = site.request("GET", f"/api/chat/{uuid.uuid4()}/stream", token=token)
    assert status == 204 and headers.get("x-frame-options") == "DENY"  # the site's middleware ran
