"""Django app of Helix chat: the models, the admin, the HTTP API and the Celery tasks."""

from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    label = "helix_chat"
    verbose_name = "Helix chat"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from chat import checks  # noqa: F401  (registers the system checks)
        from chat.state import cascade

        cascade.connect()
