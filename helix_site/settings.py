"""Settings of the Helix site, read from the environment with safe defaults.

Environment variables (the ops interface): ``DJANGO_SECRET_KEY``, ``DJANGO_DEBUG``,
``DJANGO_ALLOWED_HOSTS``, ``DATABASE_URL`` (default: a SQLite file), ``REDIS_URL``,
``HELIX_STREAM_BACKEND`` (``memory`` | ``redis``), ``HELIX_EXECUTOR`` (``inprocess`` |
``celery``). ``docs/settings.md`` has the full table.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from helix_site.env import env_bool, env_choice, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "django-insecure-helix-development-key-change-me")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
# A CSRF cookie JavaScript cannot read, as many sites keep it: the page hands the helpers its
# token in a meta tag ({% helix_csrf_meta %}).
CSRF_COOKIE_HTTPONLY = env_bool("DJANGO_CSRF_COOKIE_HTTPONLY", False)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "streams",
    "workers",
    "chat",
    "helix_site",  # the demo pages: templates and static files
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "helix_site.urls"
ASGI_APPLICATION = "helix_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'helix.sqlite3'}"), conn_max_age=60, conn_health_checks=True
    ),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web processes and workers share the file: WAL lets readers go on while one writes, and
    # IMMEDIATE transactions queue writers instead of failing them.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Tests share their database with worker processes, so it is a file, not memory.
    DATABASES["default"]["TEST"] = {"NAME": env_str("HELIX_TEST_DATABASE", str(BASE_DIR / "helix-test.sqlite3"))}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # request bodies: 1 MiB

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

_stream_backend = env_choice("HELIX_STREAM_BACKEND", "memory", ("memory", "redis"))
RUN_TIME_LIMIT_SECONDS = int(env_str("HELIX_RUN_TIME_LIMIT", "1800"))
HELIX = {
    "STREAMS": {
        "BACKEND": _stream_backend,
        "OPTIONS": (
            {"url": REDIS_URL, "retry_timeout": float(env_str("HELIX_REDIS_RETRY_TIMEOUT", "30"))}
            if _stream_backend == "redis"
            else {}
        ),
    },
    "EXECUTOR": env_choice("HELIX_EXECUTOR", "inprocess", ("inprocess", "celery")),
    "CELERY_QUEUE": env_str("HELIX_CELERY_QUEUE", "helix"),
    "ALLOW_ANONYMOUS": env_bool("HELIX_ALLOW_ANONYMOUS", False),
    "AGENT_MODULES": env_list("HELIX_AGENT_MODULES", ["workers.demo_agents"]),
    "SCRIPTED_DELAY_MS": env_str("HELIX_SCRIPTED_DELAY_MS", "20-40"),
    "CONTENT_REPLAY": env_bool("HELIX_CONTENT_REPLAY", True),
    "DOUBLE_TEXTING": env_choice("HELIX_DOUBLE_TEXTING", "reattach", ("reject", "reattach", "interrupt", "enqueue")),
    "LLM": {
        "MODEL": env_str("HELIX_LLM_MODEL", "gpt-4o-mini"),
        "BASE_URL": env_str("OPENAI_BASE_URL", "") or None,
        "API_KEY": env_str("OPENAI_API_KEY", "") or None,
    },
    # Token clients first: an unauthenticated request then answers 401 with its scheme.
    "AUTHENTICATION_CLASSES": [
        "chat.http.authentication.TokenAuthentication",  # DRF's, its lookup compiled once
        "rest_framework.authentication.SessionAuthentication",
    ],
    "PERMISSION_CLASSES": [],
    "THROTTLE_RATES": {"helix_chat": env_str("HELIX_CHAT_RATE", "30/minute")},
    "SLOW_CLIENT_TIMEOUT_SECONDS": float(env_str("HELIX_SLOW_CLIENT_TIMEOUT", "30")),
    "MAX_STREAMS_PER_CALLER": int(env_str("HELIX_MAX_STREAMS_PER_CALLER", "16")),
    "SERVER_MAX_BODY_BYTES": 2 * 1024 * 1024,  # the demo site takes no uploads
    "SERVER_HEADER_TIMEOUT_SECONDS": float(env_str("HELIX_SERVER_HEADER_TIMEOUT_SECONDS", "10")),
    "RUN_TIME_LIMIT_SECONDS": RUN_TIME_LIMIT_SECONDS,
    "LEASE_SECONDS": float(env_str("HELIX_LEASE_SECONDS", "4")),
    "HEARTBEAT_SECONDS": float(env_str("HELIX_HEARTBEAT_SECONDS", "1")),
}

CELERY_BROKER_URL = REDIS_URL
# kombu's Redis transport, except that a full Redis (maxmemory, no eviction) does not make a
# worker exit when it acknowledges a task (workers.broker).
CELERY_BROKER_TRANSPORT = "workers.broker:RedisTransport"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# Helix's tasks go to HELIX["CELERY_QUEUE"]; a worker consumes it with `-Q` (bin/run's docs).
CELERY_TASK_DEFAULT_QUEUE = HELIX["CELERY_QUEUE"]
# A message not acknowledged in this time is delivered again: longer than any run may take.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": RUN_TIME_LIMIT_SECONDS + 600}
# Runs wait on I/O: a thread per task, all runs of the process on one shared event loop
# (workers.event_loop). `celery -A helix_site worker` then holds this many runs at once.
CELERY_WORKER_POOL = env_str("HELIX_WORKER_POOL", "threads")
CELERY_WORKER_CONCURRENCY = int(env_str("HELIX_WORKER_CONCURRENCY", "100"))
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The reaper hands runs whose worker died to a live one (`celery -A helix_site beat`, or
# `manage.py reap_runs --loop` where beat does not run).
CELERY_BEAT_SCHEDULE = {
    "helix-reap-runs": {"task": "helix.reap_runs", "schedule": float(env_str("HELIX_REAP_INTERVAL", "1"))},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
