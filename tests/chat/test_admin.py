"""The admin: staff only, readable sessions with their stream timeline, pending calls decided only
by staff who may change them."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat.models import ChatSession, PendingCall, Run
from chat.state.store import DjangoStateStore
from streams.backends import get_stream_manager
from streams.messages import StoredMessage, ToolCall
from workers.runtime.persistence import RunOutcome

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def session_id() -> str:
    store = DjangoStateStore()
    session_id = str(uuid.uuid4())

    async def build() -> None:
        run_id = await store.start_run(
            session_id,
            "tools",
            user_message=StoredMessage(role="user", content="Add 2 and 2"),
            start_sequence=0,
            message_id="m1",
        )
        writer = await get_stream_manager().create_writer(session_id, run_id, "tools")
        await writer.write({"type": "text_delta", "delta": "Computing <sum>"})
        await writer.write({"type": "tool_start", "toolCallId": "c1", "toolName": "calculator", "arguments": {"a": 2}})
        step = [
            StoredMessage(
                role="assistant",
                id="m1",
                content="Computing <sum>",
                tool_calls=[ToolCall(id="c1", name="calculator", arguments={"a": 2})],
            ),
            StoredMessage(role="tool", tool_call_id="c1", content="4"),
        ]
        await store.commit_step(run_id, 1, step, {"sum": 4}, 2)
        await store.finish_run(run_id, RunOutcome("completed"))
        await get_stream_manager().end_stream(session_id)

    async_to_sync(build)()
    return session_id


def test_admin_is_staff_only(client: Client, session_id: str) -> None:
    url = reverse("admin:helix_chat_chatsession_changelist")
    assert client.get(url).status_code == 302
    User.objects.create_user("alice", password="pw-not-staff")
    client.login(username="alice", password="pw-not-staff")
    assert client.get(url).status_code == 302


def test_session_pages_render_messages_and_the_timeline(admin_client: Client, session_id: str) -> None:
    listing = admin_client.get(reverse("admin:helix_chat_chatsession_changelist"), {"status": "idle", "agent": "tools"})
    assert listing.status_code == 200 and session_id[:8] in listing.content.decode()
    page = admin_client.get(reverse("admin:helix_chat_chatsession_change", args=[session_id])).content.decode()
    assert "calculator" in page and "Computing &lt;sum&gt;" in page  # rendered, and escaped
    assert "Stream timeline" in page and "tool_start" in page and "status <b>ended</b>, 2 chunks" in page
    for name in ("run", "message", "checkpoint"):
        assert admin_client.get(reverse(f"admin:helix_chat_{name}_changelist")).status_code == 200
    search = admin_client.get(reverse("admin:helix_chat_message_changelist"), {"q": "Add 2"})
    assert "Add 2 and 2" in search.content.decode()


def test_the_timeline_strikes_out_a_discarded_step(admin_client: Client) -> None:
    session_id = str(uuid.uuid4())

    async def build() -> None:
        run_id = await DjangoStateStore().start_run(
            session_id, "chat", user_message=StoredMessage(role="user", content="Hi"), start_sequence=0, message_id="m"
        )
        writer = await get_stream_manager().create_writer(session_id, run_id, "chat")
        await writer.write({"type": "text_delta", "delta": "voided words"})
        await writer.write(
            {
                "type": "step_discarded",
                "runId": run_id,
                "step": 1,
                "attempt": 2,
                "fromSequence": 1,
                "toSequence": 1,
                "reason": "worker_lost",
            }
        )
        await writer.write({"type": "text_delta", "delta": "kept words"})

    async_to_sync(build)()
    page = admin_client.get(reverse("admin:helix_chat_chatsession_change", args=[session_id])).content.decode()
    struck = [row for row in page.split("<tr") if "line-through" in row]
    assert len(struck) == 1 and "voided words" in struck[0]
    assert "kept words" in page
    assert admin_client.get(reverse("admin:helix_chat_pendingcall_changelist")).status_code == 200


def test_a_tool_message_says_whether_it_is_a_result_an_error_or_a_denial() -> None:
    from chat.admin import render_message
    from chat.models import Message

    def label(metadata: dict[str, object]) -> str:
        message = Message(role=Message.Role.TOOL, tool_call_id="c1", content="…", metadata=metadata)
        return str(render_message(message)).split(" of ")[0].removeprefix("<div>")

    assert [label({}), label({"error": "boom"}), label({"denied": True})] == ["result", "error", "denied"]


@pytest.fixture
def paused_call() -> PendingCall:
    """An approval a paused run waits on, its last pending call."""
    session = ChatSession.objects.create(agent="assistant")
    run = Run.objects.create(session=session, agent="assistant", status=Run.Status.PAUSED)
    return PendingCall.objects.create(
        run=run,
        session=session,
        kind=PendingCall.Kind.APPROVAL,
        tool_call_id="c1",
        tool_name="send_email",
        expires_at=timezone.now() + timedelta(hours=1),
    )


@pytest.fixture
def resumed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The runs the admin sends on to a worker."""
    from chat import admin

    runs: list[str] = []

    async def resume(session_id: str, run_id: str, agent: str) -> None:
        runs.append(run_id)

    monkeypatch.setattr(admin, "resume_answered_run", resume)
    return runs


def staff(username: str, *codenames: str) -> Client:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="helix_chat", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def decide(client: Client, call: PendingCall, action: str) -> None:
    url = reverse("admin:helix_chat_pendingcall_changelist")
    client.post(url, {"action": action, "_selected_action": [str(call.pk)]})


def test_staff_who_may_only_view_pending_calls_cannot_decide_them(paused_call: PendingCall, resumed: list[str]) -> None:
    viewer = staff("viewer", "view_pendingcall")
    for action in ("approve", "deny"):  # a forged form changes nothing
        decide(viewer, paused_call, action)
    paused_call.refresh_from_db()
    assert (paused_call.status, paused_call.decided_by_id, resumed) == ("pending", None, [])
    listing = viewer.get(reverse("admin:helix_chat_pendingcall_changelist")).content.decode()
    assert "send_email" in listing and "the selected calls" not in listing  # nor offers them


def test_staff_who_may_change_pending_calls_approve_them_and_the_run_goes_on(
    paused_call: PendingCall, resumed: list[str]
) -> None:
    decider = staff("decider", "view_pendingcall", "change_pendingcall")
    decide(decider, paused_call, "approve")
    paused_call.refresh_from_db()
    assert (paused_call.status, paused_call.decided_by_id) == ("approved", User.objects.get(username="decider").pk)
    assert resumed == [str(paused_call.run_id)]
