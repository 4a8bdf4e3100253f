from django.apps import AppConfig


class UsersConfig(AppConfig):
    name = "shop.users"
    label = "users"
