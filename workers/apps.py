"""Django app of the producers: the agent runtime, models of LLMs and the executors."""

from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"
    label = "helix_workers"
    verbose_name = "Helix workers"
    default_auto_field = "django.db.models.BigAutoField"
