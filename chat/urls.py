"""The Helix chat API. A site mounts it under any prefix: ``path("api/", include("chat.urls"))``.

Only the API is here (no pages, no demo); names are in the ``helix`` namespace
(``reverse("helix:chat", args=[session_id])``).
"""

from django.urls import path

from chat import openapi
from chat.http import views

app_name = "helix"

urlpatterns = [
    path("chat", views.NewChatView.as_view(), name="chat-new"),
    path("chat/<str:session_id>", views.ChatView.as_view(), name="chat"),
    path("chat/<str:session_id>/stream", views.ChatStreamView.as_view(), name="chat-stream"),
    path("chat/<str:session_id>/snapshot", views.SnapshotView.as_view(), name="chat-snapshot"),
    path("chat/<str:session_id>/messages", views.MessagesView.as_view(), name="chat-messages"),
    path("chat/<str:session_id>/stop", views.StopView.as_view(), name="chat-stop"),
    path("chat/<str:session_id>/feed", views.SessionFeedView.as_view(), name="chat-feed"),
    path("sessions", views.SessionListView.as_view(), name="sessions"),
    path("agents", views.AgentsView.as_view(), name="agents"),
    path("schema", openapi.schema_view, name="schema"),
]
