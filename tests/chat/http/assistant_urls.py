"""A site that mounts the Helix API under ``/assistant/`` (and has a ``/api/chat/…`` of its own)."""

from django.http import HttpResponse
from django.urls import include, path

urlpatterns = [
    path("assistant/", include("chat.urls")),
    path("api/chat/<str:anything>", lambda request, anything: HttpResponse("the site's own view")),
]
