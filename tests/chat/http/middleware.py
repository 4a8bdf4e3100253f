"""A site's own gate, as a test site installs it: an allow-list of client addresses, and a header
it adds to every response it lets through."""

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden

ALLOWED = {"127.0.0.1"}


class SiteGate:
    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.META.get("REMOTE_ADDR") not in ALLOWED:
            return HttpResponseForbidden("not from here")
        response: HttpResponse = self.get_response(request)
        response["X-Site-Gate"] = "passed"
        return response
