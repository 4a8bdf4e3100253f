"""Settings of hostsite, a Django shop's own project that installs Helix from its wheel.

Laid out as ``django-admin startproject`` lays them out, plus what Helix's README asks for. Only
what varies per test run comes from the environment: ``DATABASE_URL`` (PostgreSQL),
``REDIS_URL`` (streams and the Celery broker) and ``HELIX_QUEUE`` (the Celery queue of Helix's
tasks). ``DEFAULT_AUTO_FIELD`` is deliberately not set: Helix's apps must not depend on it.
"""

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "django-insecure-hostsite-only-for-the-host-project-test"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",  # the shop's mobile app signs in with DRF tokens
    "drf_spectacular",  # the shop's OpenAPI schema
    # Helix
    "streams",
    "workers",
    "chat",
    # the shop's own apps; `support` has the app label "chat"
    "accounts",
    "support",
]

# The shop's gate comes first: every request, Helix's streams included, passes it.
SHOP_ALLOWED_ADDRESSES = {"127.0.0.1"}

MIDDLEWARE = [
    "support.gate.ShopGate",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "hostsite.urls"

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

WSGI_APPLICATION = "hostsite.wsgi.application"


def postgres(url: str) -> dict[str, Any]:
    """A ``postgres://user:password@host:port/name`` URL as a DATABASES entry."""
    parts = urlparse(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must be a PostgreSQL URL, not {url!r}")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


DATABASES = {"default": postgres(os.environ["DATABASE_URL"])}

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

# The shop's own API defaults; Helix's endpoints take the authentication class from HELIX below
# and the permission classes from here.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

REDIS_URL = os.environ["REDIS_URL"]

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "hostsite",
    }
}

HELIX = {
    "STREAMS": {"BACKEND": "redis", "OPTIONS": {"url": REDIS_URL}},
    "EXECUTOR": "celery",
    "CELERY_QUEUE": os.environ["HELIX_QUEUE"],
    "AGENT_MODULES": ["support.agents"],
    "DEFAULT_AGENT": "helpdesk",
    # DRF tokens (the mobile app's, with Helix's compiled lookup) and the shop's API keys.
    "AUTHENTICATION_CLASSES": ["chat.http.authentication.TokenAuthentication", "accounts.auth.ApiKeyAuthentication"],
    "THROTTLE_CACHE": "default",  # chat POSTs are counted in the shop's own cache
    "SCRIPTED_DELAY_MS": "5",
    "RUN_TIME_LIMIT_SECONDS": 120,
}

CELERY_BROKER_URL = REDIS_URL
CELERY_BROKER_TRANSPORT = "workers.broker:RedisTransport"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# Longer than any run may take, or a run still going is delivered to a second worker.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": HELIX["RUN_TIME_LIMIT_SECONDS"] + 600}
CELERY_WORKER_POOL = "threads"
CELERY_WORKER_CONCURRENCY = 8
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {"helix-reap-runs": {"task": "helix.reap_runs", "schedule": 1.0}}
