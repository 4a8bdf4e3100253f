"""The shop's own gate in front of everything it serves: an allow-list of client addresses, and a
header on every response it lets through."""

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden


class ShopGate:
    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.META.get("REMOTE_ADDR") not in settings.SHOP_ALLOWED_ADDRESSES:
            return HttpResponseForbidden("This shop's API is not served to your address.")
        response: HttpResponse = self.get_response(request)
        response["X-Shop-Gate"] = "passed"
        return response
