"""Reading settings from the environment: the ops interface of the site."""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

__all__ = ["env_bool", "env_choice", "env_list", "env_str"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    """The variable's value, or ``default`` when it is unset or empty."""
    return os.environ.get(name) or default


def env_bool(name: str, default: bool) -> bool:
    """A boolean variable: 1/true/yes/on or 0/false/no/off (case-insensitive)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {raw!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list."""
    raw = os.environ.get(name)
    if not raw:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``."""
    value = env_str(name, default).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value
