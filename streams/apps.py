"""Django app of the stream layer (chunk protocol, stream store, SSE primitives)."""

from django.apps import AppConfig


class StreamsConfig(AppConfig):
    name = "streams"
    label = "helix_streams"
    verbose_name = "Helix streams"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from streams import checks  # noqa: F401  (registers the system checks)
