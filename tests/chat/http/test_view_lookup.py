"""find_view answers as Django's resolver does, for every kind of pattern a site may have."""

from __future__ import annotations

import types
import uuid
from typing import Any

import pytest
from django.http import HttpResponse
from django.urls import URLResolver, get_resolver, include, path, re_path
from django.urls.exceptions import Resolver404
from django.urls.resolvers import RegexPattern

from chat.http.view_lookup import UNKNOWN, find_view


def view(name: str) -> Any:
    def answer(request: Any, *args: Any, **kwargs: Any) -> HttpResponse:
        return HttpResponse(name)

    answer.__name__ = name
    return answer


def urlconf() -> types.ModuleType:
    inner = [
        path("chat/<uuid:session_id>", view("chat"), {"extra": 1}),
        re_path(r"^raw/(\d+)/(\w+)$", view("positional")),
        re_path(r"^named/(?P<n>\d+)/(\d+)$", view("named-and-positional")),
    ]
    module = types.ModuleType("view_lookup_urls")
    module.urlpatterns = [  # type: ignore[attr-defined]
        path("admin/", include([path("login/", view("login"))])),
        re_path(r"^api/chat/shadowed$", view("shadow")),  # before the include: it wins
        path("api/", include(inner), {"site": "a"}),
        path("t/<str:tenant>/", include((inner, "tenant"), namespace="tenant"), {"site": "b"}),
        re_path(r"^g/(\w+)/", include(inner)),
        path("", include([path("deep/", include([path("<int:n>", view("deep"))]))])),
    ]
    return module


@pytest.fixture
def resolver() -> URLResolver:
    return URLResolver(RegexPattern(r"^/"), urlconf())


def django_answer(resolver: URLResolver, url: str) -> Any:
    try:
        match = resolver.resolve(url)
    except Resolver404:
        return None
    return match.func, tuple(match.args), match.kwargs


SESSION = str(uuid.uuid4())
PATHS = [
    f"/api/chat/{SESSION}",
    "/api/chat/shadowed",
    f"/t/acme/chat/{SESSION}",
    f"/g/grp/chat/{SESSION}",
    "/g/grp/raw/12/ab",
    "/api/raw/12/ab",
    "/api/named/3/4",
    "/deep/42",
    "/deep/x",
    "/admin/login/",
    "/api/chat/not-a-uuid",
    "/nowhere",
    "/",
    "",
]


@pytest.mark.parametrize("url", PATHS)
def test_the_view_and_arguments_are_djangos(resolver: URLResolver, url: str) -> None:
    assert find_view(resolver, url) == django_answer(resolver, url)


def test_the_sites_urlconf_answers_as_django(settings: Any) -> None:
    resolver = get_resolver()
    for url in [f"/api/chat/{SESSION}", f"/api/chat/{SESSION}/stream", "/api/sessions", "/admin/", "/x"]:
        assert find_view(resolver, url) == django_answer(resolver, url)


def test_a_resolver_of_another_class_is_left_to_django(resolver: URLResolver) -> None:
    class Custom(URLResolver):
        pass

    module = types.ModuleType("custom_urls")
    first = view("first")
    module.urlpatterns = [path("a/<int:n>", first), Custom(RegexPattern(r"^c/"), urlconf())]  # type: ignore[attr-defined]
    outer = URLResolver(RegexPattern(r"^/"), module)
    assert find_view(outer, f"/c/api/chat/{SESSION}") is UNKNOWN
    assert find_view(outer, "/elsewhere") is UNKNOWN  # the custom resolver might have taken it
    assert find_view(outer, "/a/7") == (first, (), {"n": 7})  # found before it
