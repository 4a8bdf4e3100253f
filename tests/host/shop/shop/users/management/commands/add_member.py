"""``manage.py add_member <email> <password>``: a member who can sign in (verified address)."""

from typing import Any

from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("email")
        parser.add_argument("password")

    def handle(self, *args: Any, email: str, password: str, **options: Any) -> None:
        user = get_user_model().objects.create_user(email=email, password=password)
        EmailAddress.objects.create(user=user, email=email, verified=True, primary=True)
