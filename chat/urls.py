"""URLs of the Helix app; a host project mounts them with ``include("chat.urls")``."""

from django.urls import path

from chat import demo

urlpatterns = [
    path("", demo.demo_page, name="demo"),
    path("demo/streams", demo.start_demo, name="demo-start"),
    path("demo/streams/<str:stream_id>/events", demo.demo_stream_events, name="demo-stream-events"),
]
