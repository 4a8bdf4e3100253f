"""``{% helix_csrf_meta %}``: the page's CSRF token where the helpers find it."""

from __future__ import annotations

import re

from django.conf import settings
from django.http import HttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.template import Context, RequestContext, Template
from django.test import RequestFactory


def accept(request: object) -> HttpResponse:
    return HttpResponse()


def test_the_meta_tag_carries_a_token_django_accepts() -> None:
    middleware = CsrfViewMiddleware(accept)
    page = RequestFactory().get("/")
    middleware.process_request(page)
    html = Template("{% load helix %}{% helix_csrf_meta %}").render(RequestContext(page))
    match = re.fullmatch(r'<meta name="csrf-token" content="([A-Za-z0-9]{64})">', html)
    assert match is not None, html
    cookie = page.META["CSRF_COOKIE"]  # what the page's response sets as the cookie
    for token, accepted in ((match.group(1), True), ("x" * 64, False)):
        post = RequestFactory().post("/", HTTP_X_CSRFTOKEN=token)
        post.COOKIES[settings.CSRF_COOKIE_NAME] = cookie
        middleware.process_request(post)
        refused = middleware.process_view(post, accept, (), {})
        assert (refused is None) == accepted


def test_without_a_request_it_takes_the_contexts_token() -> None:
    html = Template("{% load helix %}{% helix_csrf_meta %}").render(Context({"csrf_token": 'a"b'}))
    assert html == '<meta name="csrf-token" content="a&quot;b">'
