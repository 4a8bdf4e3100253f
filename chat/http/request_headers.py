"""A request's headers, read by name from ``META`` without parsing them all first.

:class:`MetaHeaders` is ``request.headers`` for the stream route's requests: it reads a header
asked for by name from ``META``, where Django's ``HttpHeaders`` would have found it, and parses
the names of all of them only when something walks them. DRF's token authentication asks for one
header of every request; parsing every name a browser sends (a dozen or more) was a quarter of a
resume's database hop.

:class:`HeadersOnly` is what a token owner's resume reads of its request
(:mod:`chat.http.owner_resume`): its headers, under the ``META`` names Django's ``ASGIRequest``
gives them, without the rest of the request, which only the pipeline needs (by ``timeit``, 1.6 µs
for a storm's resume, where its Django request took 8.1 µs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http.request import HttpHeaders
from django.utils.functional import cached_property

__all__ = ["HeadersOnly", "MetaHeaders"]

_UNPREFIXED = {"content-type": "CONTENT_TYPE", "content-length": "CONTENT_LENGTH"}


class MetaHeaders(HttpHeaders):
    """``request.headers`` over ``environ`` (a request's ``META``): a header asked for by name is
    a dict lookup; the names of all of them are parsed only when something walks them."""

    def __init__(self, environ: dict[str, Any]) -> None:  # the names are parsed when walked
        self._environ = environ

    @cached_property
    def _store(self) -> dict[str, tuple[str, Any]]:  # type: ignore[override]
        return HttpHeaders(self._environ)._store  # type: ignore[no-any-return,attr-defined]

    def __getitem__(self, key: str) -> Any:
        name = key.replace("_", "-")
        if not name or name.lower() in _UNPREFIXED:  # a CGI name, or none: as HttpHeaders has them
            return super().__getitem__(key)
        try:
            return self._environ["HTTP_" + name.replace("-", "_").upper()]
        except KeyError:
            raise KeyError(key) from None


class HeadersOnly:
    """The headers of the request of ASGI ``scope``: ``META`` holds them as Django's
    ``ASGIRequest`` does (a name with an underscore left out, so that it cannot pass for one
    with a hyphen; a repeated header's values joined with commas), ``headers`` reads them by
    name. A test compares the two on the installed Django."""

    __slots__ = ("META", "headers")

    def __init__(self, scope: Mapping[str, Any]) -> None:
        meta: dict[str, Any] = {}
        for raw_name, raw_value in scope.get("headers", ()):
            name = raw_name.decode("latin-1")
            if "_" in name:
                continue
            key = _UNPREFIXED.get(name) or "HTTP_" + name.upper().replace("-", "_")
            value = raw_value.decode("latin-1")
            meta[key] = meta[key] + "," + value if key in meta else value
        self.META = meta
        self.headers = MetaHeaders(meta)
