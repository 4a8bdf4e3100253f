"""System checks of a site that runs Helix chat (ids ``helix.E1xx`` errors, ``helix.W1xx``
warnings): each names the setting to fix, at startup, before any request finds it broken."""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import urlparse

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.utils.module_loading import import_string

from streams.conf import helix_settings

__all__ = ["DEMO_AGENT_MODULES", "check_chat_settings"]

#: The modules of demo agents that ship with Helix: for trying it out, not for production.
DEMO_AGENT_MODULES = frozenset({"workers.demo_agents"})
GZIP_MIDDLEWARE = "django.middleware.gzip.GZipMiddleware"
#: kombu's Redis transport redelivers an unacknowledged message after this many seconds.
KOMBU_DEFAULT_VISIBILITY_TIMEOUT = 3600


def _agent_modules() -> list[CheckMessage]:
    modules = helix_settings.AGENT_MODULES
    if not isinstance(modules, (list, tuple)) or not all(isinstance(m, str) for m in modules):
        return [Error("HELIX['AGENT_MODULES'] must be a list of module paths.", id="helix.E101")]
    problems: list[CheckMessage] = []
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            problems.append(
                Error(
                    f"HELIX['AGENT_MODULES'] names {module!r}, which cannot be imported: {exc}",
                    hint="Name the modules that call define_agent(), importable from the site.",
                    id="helix.E102",
                )
            )
    demo = sorted(DEMO_AGENT_MODULES & set(modules))
    if demo and not settings.DEBUG:
        problems.append(
            Warning(
                f"The demo agents ({', '.join(demo)}) are registered while DEBUG is off.",
                hint="Remove them from HELIX['AGENT_MODULES'] in production: they answer with canned text.",
                id="helix.W103",
            )
        )
    if not problems:
        from workers.runtime.agents import agent_names

        if helix_settings.DEFAULT_AGENT not in agent_names():
            problems.append(
                Warning(
                    f"HELIX['DEFAULT_AGENT'] is {helix_settings.DEFAULT_AGENT!r}, which no module of "
                    "HELIX['AGENT_MODULES'] registers: a chat POST that names no agent fails.",
                    hint=f"Registered: {', '.join(agent_names()) or 'none'}.",
                    id="helix.W104",
                )
            )
    return problems


def _classes() -> list[CheckMessage]:
    problems: list[CheckMessage] = []
    for key in ("AUTHENTICATION_CLASSES", "PERMISSION_CLASSES", "THROTTLE_CLASSES", "OVERRIDE_PERMISSION_CLASSES"):
        value = getattr(helix_settings, key)
        if value is None:
            continue
        if not isinstance(value, (list, tuple)):
            problems.append(Error(f"HELIX['{key}'] must be a list of dotted paths (or None).", id="helix.E105"))
            continue
        for name in value:
            try:
                import_string(name) if isinstance(name, str) else name
            except ImportError as exc:
                problems.append(
                    Error(f"HELIX['{key}'] names {name!r}, which cannot be imported: {exc}", id="helix.E105")
                )
    alias = helix_settings.THROTTLE_CACHE
    if alias is not None and alias not in settings.CACHES:
        problems.append(
            Error(f"HELIX['THROTTLE_CACHE'] names the cache {alias!r}, which CACHES does not define.", id="helix.E106")
        )
    return problems


def _gzip() -> list[CheckMessage]:
    if GZIP_MIDDLEWARE not in getattr(settings, "MIDDLEWARE", []):
        return []
    return [
        Warning(
            "GZipMiddleware compresses Helix's streamed responses: it holds events back until its "
            "compressor flushes, so chat answers arrive in bursts or not at all.",
            hint="Remove it, or compress in the proxy with text/event-stream excluded.",
            id="helix.W107",
        )
    ]


def _connections() -> list[CheckMessage]:
    problems: list[CheckMessage] = []
    for alias, database in settings.DATABASES.items():
        if database.get("CONN_MAX_AGE", 0) != 0 and not database.get("CONN_HEALTH_CHECKS", False):
            problems.append(
                Warning(
                    f"DATABASES[{alias!r}] keeps connections (CONN_MAX_AGE) without CONN_HEALTH_CHECKS: "
                    "Helix's database threads outlive requests, and after a database restart a kept "
                    "connection fails once before it is replaced.",
                    hint=f"Set DATABASES[{alias!r}]['CONN_HEALTH_CHECKS'] = True.",
                    id="helix.W108",
                )
            )
    return problems


def _visibility_timeout() -> list[CheckMessage]:
    if helix_settings.EXECUTOR != "celery":
        return []
    try:
        from celery import current_app
    except ImportError:  # pragma: no cover - celery is a dependency
        return []
    conf = current_app.conf
    broker = str(conf.broker_url or "")
    if urlparse(broker).scheme not in ("redis", "rediss", "sqs"):
        return []
    options: dict[str, Any] = conf.broker_transport_options or {}
    timeout = float(options.get("visibility_timeout", KOMBU_DEFAULT_VISIBILITY_TIMEOUT))
    limit = float(helix_settings.RUN_TIME_LIMIT_SECONDS)
    if timeout > limit:
        return []
    return [
        Error(
            f"The Celery broker's visibility_timeout ({timeout:.0f} s) is not longer than "
            f"HELIX['RUN_TIME_LIMIT_SECONDS'] ({limit:.0f} s): a run still going is delivered to a "
            "second worker.",
            hint="Set CELERY_BROKER_TRANSPORT_OPTIONS = {'visibility_timeout': <run limit + 600>}.",
            id="helix.E109",
        )
    ]


@register("helix")
def check_chat_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The chat side of the Helix settings, and the site settings Helix depends on."""
    return [
        *_agent_modules(),
        *_classes(),
        *_gzip(),
        *_connections(),
        *_visibility_timeout(),
        *_broker_transport(),
        *_double_texting(),
    ]


@register("helix", deploy=True)
def check_helix_queue(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``check --deploy``: runs go to Helix's own queue; a site whose Celery default queue is
    another one needs its workers started with ``-Q`` naming it, or chats are refused
    (503 EXECUTOR_UNAVAILABLE)."""
    if helix_settings.EXECUTOR != "celery":
        return []
    from celery import current_app

    queue = str(helix_settings.CELERY_QUEUE)
    default = current_app.conf.task_default_queue
    if default == queue:
        return []
    return [
        Warning(
            f"Helix sends runs to the Celery queue {queue!r}, which is not this site's default queue "
            f"({default!r}): a worker started without -Q consumes only the default one, and chats are "
            "refused while no worker consumes Helix's.",
            hint=f"Start a worker with `celery -A <your app> worker -Q {queue}` (or -Q {default},{queue}).",
            id="helix.W112",
        )
    ]


def _broker_transport() -> list[CheckMessage]:
    if helix_settings.EXECUTOR != "celery":
        return []
    from celery import current_app

    conf = current_app.conf
    if urlparse(str(conf.broker_url or "")).scheme != "redis" or conf.broker_transport not in (None, "redis"):
        return []
    return [
        Warning(
            "Celery's Redis transport makes a worker exit when Redis is full (maxmemory, no eviction) "
            "as it acknowledges a task, with every run the worker holds.",
            hint="Set CELERY_BROKER_TRANSPORT = 'workers.broker:RedisTransport'.",
            id="helix.W111",
        )
    ]


def _double_texting() -> list[CheckMessage]:
    from chat.http.double_texting import POLICIES

    if helix_settings.DOUBLE_TEXTING in POLICIES:
        return []
    return [
        Error(
            f"HELIX['DOUBLE_TEXTING'] must be one of {', '.join(POLICIES)}, not {helix_settings.DOUBLE_TEXTING!r}.",
            id="helix.E110",
        )
    ]
