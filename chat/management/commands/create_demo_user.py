"""``manage.py create_demo_user``: a user (and an API token) to try Helix with."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Create (or reset) a demo user and print its API token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo")
        parser.add_argument("--password", default="demo-password")
        parser.add_argument("--staff", action="store_true", help="let the user into the admin")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        user, created = users.objects.get_or_create(username=options["username"])
        user.set_password(options["password"])
        user.is_staff = user.is_superuser = bool(options["staff"])
        user.save()
        token, _ = Token.objects.get_or_create(user=user)
        verb = "Created" if created else "Reset"
        self.stdout.write(f"{verb} user {user.username!r} (password {options['password']!r}); API token {token.key}")
