"""Django admin for sessions, runs, messages, checkpoints and pending tool calls (staff only).

A session's page shows its conversation readably (tool calls and results included) and a
read-only timeline of its stream, read from the stream store. Pending approvals can be approved
or denied from their list by staff with the change permission on pending calls (a view permission
only shows them); once a run has all its answers it goes on, on a worker.
"""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from chat.ai_sdk.snapshot import without_discarded
from chat.models import ChatSession, Checkpoint, Message, PendingCall, Run
from chat.state.approvals import ToolAnswer, decide_calls, run_is_answered
from chat.state.executors import resume_answered_run
from streams.backends import get_stream_manager
from streams.exceptions import HelixError
from streams.protocol import dump_chunk

TIMELINE_LIMIT = 500


def _pretty(value: Any) -> SafeString:
    return format_html(
        "<pre style='white-space:pre-wrap;margin:0'>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False)
    )


def _short(text: str, length: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= length else text[: length - 1] + "…"


def render_message(message: Message) -> SafeString:
    """A message as an admin reads it: text, reasoning, tool calls with their arguments."""
    pieces = []
    if message.reasoning:
        pieces.append(format_html("<details><summary>reasoning</summary>{}</details>", message.reasoning))
    if message.content:
        pieces.append(format_html("<div style='white-space:pre-wrap'>{}</div>", message.content))
    for call in message.tool_calls:
        pieces.append(
            format_html(
                "<div>🔧 <b>{}</b> <code>{}</code>{}</div>",
                call.get("name"),
                call.get("id"),
                _pretty(call.get("arguments")),
            )
        )
    if message.role == Message.Role.TOOL:
        label = "denied" if message.metadata.get("denied") else "error" if message.metadata.get("error") else "result"
        pieces.insert(0, format_html("<div>{} of <code>{}</code></div>", label, message.tool_call_id))
    return format_html_join("", "{}", ((piece,) for piece in pieces))


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class RunInline(ReadOnlyInline):
    model = Run
    fields = ("status", "agent", "step_count", "attempt", "created_at", "error_code")
    readonly_fields = fields


class MessageInline(ReadOnlyInline):
    model = Message
    fields = ("position", "role", "rendered")
    readonly_fields = fields
    ordering = ("position",)

    @admin.display(description="message")
    def rendered(self, obj: Message) -> SafeString:
        return render_message(obj)


class CheckpointInline(ReadOnlyInline):
    model = Checkpoint
    fields = ("step", "message_count", "stream_sequence", "created_at")
    readonly_fields = fields


@admin.register(ChatSession)
class SessionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("short_id", "title", "agent", "owner", "status", "updated_at")
    list_filter = ("status", "agent", ("owner", admin.RelatedOnlyFieldListFilter), "created_at")
    search_fields = ("id", "title", "owner__username", "owner__email")
    readonly_fields = ("id", "owner", "agent", "status", "created_at", "updated_at", "state_view", "timeline")
    fields = ("id", "title", "owner", "agent", "status", "created_at", "updated_at", "state_view", "timeline")
    inlines = (RunInline, MessageInline)
    date_hierarchy = "created_at"

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: ChatSession) -> str:
        return str(obj.id)[:8]

    @admin.display(description="state")
    def state_view(self, obj: ChatSession) -> SafeString:
        return _pretty(obj.state)

    @admin.display(description="stream timeline")
    def timeline(self, obj: ChatSession) -> SafeString:
        try:
            chunks = async_to_sync(get_stream_manager().get_all_chunks)(str(obj.id))
            info = async_to_sync(get_stream_manager().get_stream_info)(str(obj.id))
        except HelixError as exc:
            return format_html("<i>stream unavailable: {}</i>", exc)
        if info is None:
            return format_html("<i>{}</i>", "no stream (expired or never started)")
        shown = chunks[-TIMELINE_LIMIT:]
        kept = {s for _, s in without_discarded(chunks)}  # a dead attempt's partial step is struck out
        rows = format_html_join(
            "",
            '<tr style="{}"><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>',
            (
                (
                    "" if sequence in kept else "text-decoration: line-through; opacity: .5",
                    sequence,
                    data.pop("type"),
                    data.pop("agentId"),
                    _short(json.dumps(_summary(data), ensure_ascii=False), 160),
                )
                for sequence, data in ((s, dump_chunk(c)) for c, s in shown)
            ),
        )
        head = format_html(
            "<p>status <b>{}</b>, {} chunks{}</p>",
            info.status,
            info.total_chunks,
            f", last {len(shown)} shown" if len(shown) < len(chunks) else "",
        )
        return format_html(
            "{}<table><thead><tr><th>seq</th><th>type</th><th>agent</th><th>data</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            head,
            rows,
        )


def _summary(data: dict[str, Any]) -> dict[str, Any]:
    data.pop("timestamp", None)
    data.pop("agentType", None)
    return data


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "short_id",
        "session",
        "agent",
        "status",
        "step_count",
        "attempt",
        "created_at",
        "duration",
        "error_code",
    )
    list_filter = ("status", "agent", "created_at")
    search_fields = ("id", "session__id", "session__title", "error_message")
    readonly_fields = [field.name for field in Run._meta.fields] + ["usage_view"]
    inlines = (CheckpointInline,)
    date_hierarchy = "created_at"

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: Run) -> str:
        return str(obj.id)[:8]

    @admin.display(description="token usage")
    def usage_view(self, obj: Run) -> SafeString:
        return _pretty(obj.usage)


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("session", "position", "role", "summary", "tool_names")
    list_filter = ("role", "session__agent", "created_at")
    search_fields = ("content", "session__id", "tool_call_id")
    readonly_fields = ("session", "run", "position", "role", "message_id", "rendered", "metadata_view", "created_at")
    exclude = ("content", "reasoning", "tool_calls", "tool_call_id", "metadata")

    @admin.display(description="content")
    def summary(self, obj: Message) -> str:
        return _short(obj.content or obj.reasoning or "")

    @admin.display(description="tools")
    def tool_names(self, obj: Message) -> str:
        return ", ".join(str(call.get("name")) for call in obj.tool_calls) or obj.tool_call_id

    @admin.display(description="message")
    def rendered(self, obj: Message) -> SafeString:
        return render_message(obj)

    @admin.display(description="metadata")
    def metadata_view(self, obj: Message) -> SafeString:
        return _pretty(obj.metadata)


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "run", "step", "message_count", "stream_sequence", "created_at")
    list_filter = ("created_at",)
    search_fields = ("id", "run__id", "session__id")
    readonly_fields = ("id", "run", "session", "step", "message_count", "stream_sequence", "created_at", "state_view")
    exclude = ("state",)

    @admin.display(description="state")
    def state_view(self, obj: Checkpoint) -> SafeString:
        return _pretty(obj.state)


@admin.register(PendingCall)
class PendingCallAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("tool_name", "kind", "status", "session", "owner", "created_at", "expires_at", "decided_by")
    list_filter = ("status", "kind", "tool_name", "created_at")
    search_fields = ("id", "tool_call_id", "tool_name", "session__id", "run__id")
    readonly_fields = [field.name for field in PendingCall._meta.fields if field.name != "arguments"] + [
        "arguments_view"
    ]
    exclude = ("arguments",)
    actions = ("approve", "deny")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="arguments")
    def arguments_view(self, obj: PendingCall) -> SafeString:
        return _pretty(obj.arguments)

    @admin.action(description="Approve the selected calls", permissions=["change"])
    def approve(self, request: HttpRequest, queryset: Any) -> None:
        self._decide(request, queryset, approved=True)

    @admin.action(description="Deny the selected calls", permissions=["change"])
    def deny(self, request: HttpRequest, queryset: Any) -> None:
        self._decide(request, queryset, approved=False)

    def _decide(self, request: HttpRequest, queryset: Any, *, approved: bool) -> None:
        for call in queryset.filter(kind=PendingCall.Kind.APPROVAL):
            try:
                resumed = _answer(call, approved=approved, user_id=request.user.pk)
            except HelixError as exc:
                self.message_user(request, f"{call.tool_name}: {exc.message}", messages.ERROR)
                continue
            verb = "approved" if approved else "denied"
            self.message_user(request, f"{call.tool_name} {verb}" + ("; the run goes on." if resumed else "."))


def _answer(call: PendingCall, *, approved: bool, user_id: int | None) -> bool:
    """A staff decision on a paused call; True when it was the run's last pending call (the run
    then goes on)."""
    answer = ToolAnswer(call.tool_call_id, approval_id=str(call.id), approved=approved, reason="decided in the admin")
    decide_calls(str(call.run_id), [answer], user_id, require_all=False)
    if not run_is_answered(str(call.run_id)):
        return False
    run = call.run
    async_to_sync(resume_answered_run)(str(run.session_id), str(run.pk), run.agent)
    return True
