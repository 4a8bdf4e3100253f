"""An authentication class in a module of its own, which only the router's startup imports."""

from __future__ import annotations

from rest_framework.authentication import SessionAuthentication


class StartupAuthentication(SessionAuthentication):
    pass
