"""URLs of hostsite: the admin and the Helix chat API under /assistant/ (nothing else)."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("assistant/", include("chat.urls")),
]
