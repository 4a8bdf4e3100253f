"""The shop's API keys: one per user, sent as ``X-Api-Key``."""

import secrets

from django.conf import settings
from django.db import models


def new_key() -> str:
    return secrets.token_hex(20)


class ApiKey(models.Model):
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_key")
    key = models.CharField(max_length=40, unique=True, default=new_key)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"API key of {self.user}"
