"""URLs of the Helix app; a host project mounts them with ``path("", include("chat.urls"))``."""

from django.urls import path

from chat import demo, openapi, views

urlpatterns = [
    path("api/chat/<str:session_id>", views.chat_endpoint, name="helix-chat"),
    path("api/chat/<str:session_id>/stream", views.stream_endpoint, name="helix-chat-stream"),
    path("api/chat/<str:session_id>/snapshot", views.snapshot_view, name="helix-chat-snapshot"),
    path("api/chat/<str:session_id>/messages", views.messages_view, name="helix-chat-messages"),
    path("api/chat/<str:session_id>/stop", views.stop_view, name="helix-chat-stop"),
    path("api/sessions", views.SessionListView.as_view(), name="helix-sessions"),
    path("api/schema", openapi.schema_view, name="helix-schema"),
    path("api/agents", views.agents_view, name="helix-agents"),
    path("", views.chat_page, name="chat"),
    path("demo/", demo.demo_page, name="demo"),
    path("demo/streams", demo.start_demo, name="demo-start"),
    path("demo/streams/<str:stream_id>/events", demo.demo_stream_events, name="demo-stream-events"),
]
