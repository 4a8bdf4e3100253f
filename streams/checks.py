"""System checks for ``settings.HELIX`` (ids ``helix.E001``…): they name the broken setting."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from django.core.checks import CheckMessage, Error, register

from streams.conf import DEFAULTS, EXECUTORS, helix_settings
from streams.exceptions import ConfigurationError

__all__ = ["check_helix_settings"]


def _number(options: dict[str, Any], name: str, *, allow_none: bool, integer: bool = False) -> str | None:
    if name not in options:
        return None
    value = options[name]
    if value is None and allow_none:
        return None
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        what = "a positive integer" if integer else "a positive number"
        return f"HELIX['STREAMS']['OPTIONS']['{name}'] must be {what}{' or None' if allow_none else ''}, not {value!r}."
    return None


@register("helix")
def check_helix_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Validate the Helix settings without connecting anywhere."""
    from streams.backends import backend_class

    errors: list[CheckMessage] = []
    unknown_keys = sorted(set(helix_settings.user_settings) - set(DEFAULTS))
    if unknown_keys:
        errors.append(
            Error(
                f"Unknown HELIX setting(s): {', '.join(unknown_keys)}.",
                hint=f"Known: {', '.join(sorted(DEFAULTS))}.",
                id="helix.E009",
            )
        )
    streams = helix_settings.STREAMS
    if not isinstance(streams, dict):
        return [Error("HELIX['STREAMS'] must be a dict.", id="helix.E001")]
    backend = streams.get("BACKEND")
    options = streams.get("OPTIONS")
    options = {} if options is None else options
    try:
        cls = backend_class(str(backend))
    except ConfigurationError as exc:
        errors.append(Error(str(exc), hint="Use 'memory', 'redis' or a dotted path.", id="helix.E002"))
        cls = None
    if not isinstance(options, dict):
        errors.append(Error("HELIX['STREAMS']['OPTIONS'] must be a dict.", id="helix.E003"))
        options = {}
    if cls is not None and cls.option_names:
        unknown = sorted(set(options) - cls.option_names)
        if unknown:
            errors.append(
                Error(
                    f"Unknown option(s) {', '.join(unknown)} for stream backend {backend!r}.",
                    hint=f"Accepted: {', '.join(sorted(cls.option_names))}.",
                    id="helix.E004",
                )
            )
    problems = [
        _number(options, "ttl", allow_none=False),
        _number(options, "active_ttl", allow_none=True),
        _number(options, "max_length", allow_none=True, integer=True),
        _number(options, "max_connections", allow_none=False, integer=True),
        _number(options, "retry_timeout", allow_none=False),
        _number(options, "socket_timeout", allow_none=False),
    ]
    errors += [Error(problem, id="helix.E005") for problem in problems if problem]
    if "url" in options:
        scheme = urlparse(str(options["url"])).scheme
        if scheme not in ("redis", "rediss", "unix"):
            errors.append(
                Error(
                    "HELIX['STREAMS']['OPTIONS']['url'] must be a redis://, rediss:// or unix:// URL, "
                    f"not {options['url']!r}.",
                    hint="Set the REDIS_URL environment variable.",
                    id="helix.E006",
                )
            )
    if helix_settings.EXECUTOR not in EXECUTORS:
        errors.append(
            Error(
                f"HELIX['EXECUTOR'] must be one of {', '.join(EXECUTORS)}, not {helix_settings.EXECUTOR!r}.",
                hint="Set HELIX['EXECUTOR'] to 'inprocess' or 'celery'.",
                id="helix.E007",
            )
        )
    for name in (
        "SSE_KEEPALIVE_SECONDS",
        "SLOW_CLIENT_TIMEOUT_SECONDS",
        "LEASE_SECONDS",
        "HEARTBEAT_SECONDS",
        "MAX_ATTEMPTS",
        "REAP_INTERVAL_SECONDS",
        "APPROVAL_TTL_SECONDS",
        "RUN_TIME_LIMIT_SECONDS",
        "DOUBLE_TEXTING_WAIT_SECONDS",
    ):
        seconds = getattr(helix_settings, name)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
            errors.append(Error(f"HELIX['{name}'] must be a positive number, not {seconds!r}.", id="helix.E008"))
    for name in ("SERVER_MAX_BODY_BYTES", "SERVER_HEADER_TIMEOUT_SECONDS"):  # None: no limit
        value = getattr(helix_settings, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            errors.append(Error(f"HELIX['{name}'] must be a positive number or None, not {value!r}.", id="helix.E008"))
    return errors
