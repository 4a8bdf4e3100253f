"""URLs of the demo site: the admin, the Helix API under ``/api/``, and the demo pages."""

from django.contrib import admin
from django.urls import include, path

from helix_site import demo

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("chat.urls")),
    path("", demo.chat_page, name="chat"),
    path("react/", demo.react_page, name="react"),
    path("react/readme/", demo.readme_page, name="react-readme"),
    path("demo/", demo.demo_page, name="demo"),
    path("demo/streams", demo.StartDemoView.as_view(), name="demo-start"),
    path("demo/streams/<str:stream_id>/events", demo.DemoEventsView.as_view(), name="demo-stream-events"),
]
