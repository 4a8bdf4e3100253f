from django.apps import AppConfig


class ConciergeConfig(AppConfig):
    name = "shop.concierge"
    label = "concierge"
