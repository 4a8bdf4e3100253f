"""Template tags of Helix: ``{% load helix %}``.

``{% helix_csrf_meta %}`` puts the page's CSRF token in ``<meta name="csrf-token">``, where the
browser helpers (``csrfToken()`` in ``helix/helix-chat.js``) find it when JavaScript cannot read
Django's CSRF cookie: ``CSRF_COOKIE_HTTPONLY = True``, or ``CSRF_USE_SESSIONS = True``.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.middleware.csrf import get_token
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.simple_tag(takes_context=True)
def helix_csrf_meta(context: dict[str, Any]) -> SafeString:
    """``<meta name="csrf-token" content="…">`` with the request's CSRF token."""
    request = context.get("request")
    token = get_token(request) if request is not None else context.get("csrf_token", "")
    return format_html('<meta name="csrf-token" content="{}">', token)
