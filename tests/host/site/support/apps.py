from django.apps import AppConfig


class SupportConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "support"
    # The shop's own "chat" app: Helix's apps are labelled helix_*, so the label is free.
    label = "chat"
    verbose_name = "Customer support chat"
