"""``manage.py issue_api_key <username>``: create the user if needed, give it a new API key, print it."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from accounts.models import ApiKey, new_key


class Command(BaseCommand):
    help = "Issue a new API key to a user (created if it does not exist) and print it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        user, _ = get_user_model().objects.get_or_create(username=username)
        api_key, _ = ApiKey.objects.update_or_create(user=user, defaults={"key": new_key()})
        self.stdout.write(api_key.key)
