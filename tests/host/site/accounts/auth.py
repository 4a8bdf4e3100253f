"""The shop's own DRF authentication: ``X-Api-Key: <key>`` names the user the key was issued to."""

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication

from accounts.models import ApiKey


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Any) -> tuple[Any, ApiKey] | None:
        key = request.META.get("HTTP_X_API_KEY")
        if not key:
            return None
        try:
            api_key = ApiKey.objects.select_related("user").get(key=key)
        except ApiKey.DoesNotExist:
            raise exceptions.AuthenticationFailed("Unknown API key.") from None
        if not api_key.user.is_active:
            raise exceptions.AuthenticationFailed("This account is disabled.")
        return api_key.user, api_key

    def authenticate_header(self, request: Any) -> str:
        return "Api-Key"
