"""A site that mounts Helix's resume views its own ways: wrapped in a decorator that turns
everyone away, subclassed, made with ``as_view()`` arguments, and at a URL that passes the
session's id by position."""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpResponse
from django.urls import path, re_path

from chat.http import views


def closed_for_maintenance(view: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(view)
    async def wrapped(request: Any, *args: Any, **kwargs: Any) -> Any:
        return HttpResponse("closed for maintenance", status=503)

    return wrapped


class AuditedChatView(views.ChatView):
    """The site's subclass: every resume it serves says so."""

    async def get(self, request: Any, session_id: str) -> Any:
        response = await super().get(request, session_id)
        response["X-Audited"] = "yes"
        return response


urlpatterns = [
    path("wrapped/chat/<str:session_id>/stream", closed_for_maintenance(views.ChatStreamView.as_view())),
    path("audited/chat/<str:session_id>", AuditedChatView.as_view()),
    path("configured/chat/<str:session_id>", views.ChatView.as_view(may_override=False)),
    re_path(r"^positional/chat/([0-9a-f-]+)$", views.ChatView.as_view()),
    path("api/chat/<str:session_id>", views.ChatView.as_view()),
]
