"""The view a path resolves to, found as Django's resolver finds it, without its match.

``URLResolver.resolve`` builds a :class:`~django.urls.ResolverMatch` at every level of
``include()`` and a list of the patterns it tried, for ``request.resolver_match`` and for the
debug 404 page: a tenth of a resume's CPU in a reconnect storm, where thousands arrive at once.
:func:`find_view` walks the same patterns in the same order with the same ``match()`` calls and
merges the captured arguments as the resolver does, and returns only the view and its arguments.
A resolver or pattern of any other class than Django's (one that may resolve differently) makes
it answer :data:`UNKNOWN`, and the caller resolves the path with Django.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.urls import URLPattern, URLResolver

__all__ = ["UNKNOWN", "find_view"]

#: :func:`find_view` cannot say: resolve the path with Django.
UNKNOWN: Any = object()

Found = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


def find_view(resolver: Any, path: str) -> Any:
    """``(view, args, kwargs)`` of ``path`` as ``resolver.resolve(path)`` has them, ``None``
    where it would raise ``Resolver404``, or :data:`UNKNOWN`."""
    if type(resolver) is not URLResolver:
        return UNKNOWN
    match = resolver.pattern.match(path)
    if not match:
        return None
    new_path, args, kwargs = match
    for pattern in resolver.url_patterns:
        if type(pattern) is URLPattern:
            found = pattern.pattern.match(new_path)
            if not found:
                continue
            sub_args, captured = found[1], found[2]
            sub: Found | None = (pattern.callback, sub_args, {**captured, **pattern.default_args})
        else:
            sub = find_view(pattern, new_path)
            if sub is UNKNOWN:
                return UNKNOWN
        if sub:
            view, sub_args, sub_kwargs = sub
            merged = {**kwargs, **resolver.default_kwargs, **sub_kwargs}
            return view, (sub_args if merged else tuple(args) + tuple(sub_args)), merged
    return None
