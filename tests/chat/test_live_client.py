"""The real AI SDK client with the Helix helpers against live Daphne + Celery worker + Redis."""

from __future__ import annotations

import http.client
import json
import uuid
from typing import Any
from urllib.parse import urlparse

import pytest

from chat.models import Run
from tests.chat.ai_sdk.client import ChatClient
from tests.chat.ai_sdk.scenario import content_view, last_reply, strict_view

pytestmark = pytest.mark.django_db(transaction=True)


def snapshot(base: str, session_id: str, token: str) -> dict[str, Any]:
    url = urlparse(base)
    connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=10)
    connection.request("GET", f"/api/chat/{session_id}/snapshot", headers={"Authorization": f"Token {token}"})
    response = connection.getresponse()
    assert response.status == 200, response.read()
    return dict(json.loads(response.read()))


def chat(
    live_client: ChatClient,
    helix_server: str,
    token: str,
    actions: list[dict[str, Any]],
    client: str = "v6",
    agent: str = "chat",
) -> tuple[str, dict[str, Any]]:
    session_id = str(uuid.uuid4())
    answer = live_client.run(client, actions, baseUrl=helix_server, sessionId=session_id, token=token, agent=agent)
    return session_id, answer


def assert_matches_server(answer: dict[str, Any], helix_server: str, session_id: str, token: str) -> None:
    assert answer["error"] is None and answer["errors"] == [], answer
    stored = snapshot(helix_server, session_id, token)
    assert stored["status"] == "ended"
    assert [m["id"] for m in answer["messages"]] == [m["id"] for m in stored["messages"]]
    assert strict_view(last_reply(answer["messages"])) == strict_view(stored["messages"][-1])


@pytest.mark.parametrize("client", ["v6", "v6-strict", "v7"])
def test_send_and_multi_turn(live_client: ChatClient, helix_server: str, token: str, client: str) -> None:
    session_id, answer = chat(
        live_client,
        helix_server,
        token,
        [{"kind": "send", "text": "What is 6 times 7?"}, {"kind": "send", "text": "And 2 plus 3?"}],
        client,
        "tools",
    )
    assert [m["role"] for m in answer["messages"]] == ["user", "assistant", "user", "assistant"]
    assert any(part["type"] == "data-search_progress" for part in answer["data"])
    assert_matches_server(answer, helix_server, session_id, token)


def test_a_dropped_connection_resumes_with_the_helpers(live_client: ChatClient, helix_server: str, token: str) -> None:
    actions: list[dict[str, Any]] = [
        {"kind": "send-and-drop", "text": "How do streams resume?", "afterMs": 400},
        {"kind": "resume"},
    ]
    session_id, answer = chat(live_client, helix_server, token, actions, agent="research")
    assert answer["status"] == "ready"
    assert_matches_server(answer, helix_server, session_id, token)


@pytest.mark.parametrize("client", ["v6", "v6-strict"])
def test_a_page_refresh_mid_answer(live_client: ChatClient, helix_server: str, token: str, client: str) -> None:
    actions: list[dict[str, Any]] = [
        {"kind": "send-and-drop", "text": "How do streams resume?", "afterMs": 400},
        {"kind": "refresh"},
    ]
    session_id, answer = chat(live_client, helix_server, token, actions, client, "research")
    assert answer["snapshots"][0]["status"] == "active"  # reloaded while the answer was streaming
    assert_matches_server(answer, helix_server, session_id, token)


def test_stop(live_client: ChatClient, helix_server: str, token: str) -> None:
    session_id, answer = chat(
        live_client,
        helix_server,
        token,
        [
            {"kind": "send-and-stop", "text": "A long question", "afterMs": 400},
            {"kind": "send", "text": "Go on, please"},  # an interrupted conversation goes on
        ],
        agent="research",
    )
    assert answer["error"] is None and answer["errors"] == [], answer
    assert any(part["type"] == "data-run-interrupted" for part in answer["data"])
    runs = list(Run.objects.filter(session_id=session_id).order_by("created_at").values_list("status", flat=True))
    assert runs == ["interrupted", "completed"]
    assert [m["role"] for m in answer["messages"]][-2:] == ["user", "assistant"]


def test_nothing_to_resume_after_the_end(live_client: ChatClient, helix_server: str, token: str) -> None:
    session_id, answer = chat(live_client, helix_server, token, [{"kind": "send", "text": "Hi"}, {"kind": "resume"}])
    assert answer["status"] == "ready" and len(answer["messages"]) == 2  # 204: nothing added
    assert_matches_server(answer, helix_server, session_id, token)


def test_a_failed_run_errors_and_resume_answers_410(live_client: ChatClient, helix_server: str, token: str) -> None:
    session_id, answer = chat(
        live_client,
        helix_server,
        token,
        # The run's `error` reaches the client before the run is recorded failed and its stream
        # marked so: a resume in that moment gets the run again, error included.
        [{"kind": "send", "text": "Hi"}, {"kind": "wait-for-end"}, {"kind": "resume"}],
        agent="broken",
    )
    assert answer["status"] == "error", answer
    assert answer["errors"][0] == "the model is down"
    assert "STREAM_FAILED" in answer["errors"][-1]
    assert Run.objects.get(session_id=session_id).error_code == "provider_overloaded"


@pytest.mark.parametrize("client", ["v6", "v7"])
def test_a_second_tab_sending_during_an_answer_joins_it(
    live_client: ChatClient, helix_server: str, token: str, client: str
) -> None:
    """Double texting, ``reattach`` (the default): the second tab's POST carries the helpers'
    position, so it streams the answer in flight instead of failing or starting another run."""
    session_id, answer = chat(
        live_client,
        helix_server,
        token,
        [{"kind": "second-tab-sends", "text": "Tell me about Lisbon", "secondText": "Hello?", "afterMs": 200}],
        client,
        agent="research",
    )
    assert answer["errors"] == [], answer
    assert_matches_server(answer, helix_server, session_id, token)
    first, second = last_reply(answer["messages"]), last_reply(answer["secondTab"]["messages"])
    assert second["id"] == first["id"] and strict_view(second) == strict_view(first)
    assert list(Run.objects.filter(session_id=session_id).values_list("status", flat=True)) == ["completed"]


@pytest.fixture(scope="module")
def replay_off_server(celery_worker: dict[str, str], redis_url: str) -> Any:
    """A second Daphne on the same worker, database and Redis, with content replay off."""
    from tests.conftest import server_env
    from tests.live import serve_site

    env = server_env(celery_worker, redis_url, HELIX_CONTENT_REPLAY="0")
    with serve_site(env) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("client", ["v6-strict", "v6", "v7"])
def test_a_refresh_mid_answer_without_content_replay_keeps_one_message(
    live_client: ChatClient, replay_off_server: str, token: str, client: str
) -> None:
    """The snapshot shows the answer so far as a ``-partial`` message; after the resume the page
    holds that one message, complete, on every pinned client."""
    actions: list[dict[str, Any]] = [
        {"kind": "send-and-drop", "text": "How do streams resume?", "afterMs": 150, "untilText": True},
        {"kind": "refresh"},
        {"kind": "wait-for-end"},
    ]
    session_id, answer = chat(live_client, replay_off_server, token, actions, client, "research")
    assert answer["errors"] == [] and answer["error"] is None, answer
    [loaded] = answer["snapshots"]
    assert loaded["status"] == "active" and loaded["messages"][-1]["id"].endswith("-partial")
    assert [m["role"] for m in answer["messages"]] == ["user", "assistant"]
    stored = snapshot(replay_off_server, session_id, token)
    assert stored["status"] == "ended"
    assert content_view(answer["messages"][-1]) == content_view(stored["messages"][-1])


@pytest.mark.parametrize(("policy", "first_run"), [("interrupt", "interrupted"), ("enqueue", "completed")])
def test_two_tabs_sending_at_once_under_the_waiting_policies(
    live_client: ChatClient, celery_worker: dict[str, str], redis_url: str, token: str, policy: str, first_run: str
) -> None:
    """``interrupt`` stops the answer in flight for the second tab's message; ``enqueue`` answers
    the second tab's message once the first answer ends. Either way both tabs finish cleanly."""
    from tests.conftest import server_env
    from tests.live import serve_site

    with serve_site(server_env(celery_worker, redis_url, HELIX_DOUBLE_TEXTING=policy)) as port:
        server = f"http://127.0.0.1:{port}"
        session_id, answer = chat(
            live_client,
            server,
            token,
            [
                {
                    "kind": "second-tab-sends",
                    "text": "How do streams resume?",
                    "secondText": "Hello?",
                    "afterMs": 30,
                    "untilText": True,
                }
            ],
            agent="research",
        )
        stored = snapshot(server, session_id, token)
    assert answer["errors"] == [] and answer["error"] is None, answer
    runs = list(Run.objects.filter(session_id=session_id).order_by("created_at").values_list("status", flat=True))
    assert runs == [first_run, "completed"]
    second = last_reply(answer["secondTab"]["messages"])
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant", "user", "assistant"]
    assert content_view(second) == content_view(stored["messages"][-1])
    assert stored["messages"][2]["parts"][0]["text"] == "Hello?"


def refresh_while_paused_then_approve(live_client: ChatClient, server: str, token: str, client: str) -> None:
    """Refresh while the run waits on an approval, then approve: after the refresh and at the end
    the page holds one assistant message equal to the snapshot, with the pending call once (not
    again in a bubble of its own), and the approval is accepted."""
    actions: list[dict[str, Any]] = [
        {"kind": "send", "text": "Email the team the notes"},
        {"kind": "refresh"},
        {"kind": "check"},
        {"kind": "approve", "approved": True},
        {"kind": "check"},
    ]
    session_id, answer = chat(live_client, server, token, actions, client, "assistant")
    assert answer["errors"] == [] and answer["error"] is None, answer
    assert answer["snapshots"][0]["status"] == "paused"
    for check in answer["checks"]:
        shown, stored = check["messages"], check["snapshot"]["messages"]
        assert [m["role"] for m in shown] == ["user", "assistant"], shown
        calls = [p["toolCallId"] for p in shown[-1]["parts"] if "toolCallId" in p]
        assert len(calls) == len(set(calls)) == 1, shown[-1]
        assert content_view(shown[-1]) == content_view(stored[-1])
    assert answer["checks"][-1]["snapshot"]["status"] == "ended"
    assert Run.objects.get(session_id=session_id).status == "completed"


@pytest.mark.parametrize("client", ["v6-strict", "v6", "v7"])
def test_a_refresh_while_paused_then_the_approval_shows_each_part_once(
    live_client: ChatClient, helix_server: str, token: str, client: str
) -> None:
    refresh_while_paused_then_approve(live_client, helix_server, token, client)


@pytest.mark.parametrize("client", ["v6-strict", "v6", "v7"])
def test_the_same_without_content_replay(
    live_client: ChatClient, replay_off_server: str, token: str, client: str
) -> None:
    refresh_while_paused_then_approve(live_client, replay_off_server, token, client)
