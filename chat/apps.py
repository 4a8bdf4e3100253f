"""Django app of the HTTP edge."""

from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Helix chat"
