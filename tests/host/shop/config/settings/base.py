"""The shop's base settings, split as the usual Django project template splits them (base,
local, production). Everything that varies per deployment comes from the environment:
``DATABASE_URL`` (PostgreSQL), ``REDIS_URL`` (cache, Celery broker and Helix's streams),
``SHOP_EXTRA_STATIC`` (a folder of front-end bundles) and ``HELIX_QUEUE``."""

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent.parent
APPS_DIR = BASE_DIR / "shop"

TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True
USE_TZ = True


def postgres(url: str) -> dict[str, Any]:
    parts = urlparse(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        # Every view of the shop runs in a transaction.
        "ATOMIC_REQUESTS": True,
    }


DATABASES = {"default": postgres(os.environ["DATABASE_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

ROOT_URLCONF = "config.urls"


DJANGO_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.sites",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.admin",
    "django.forms",
]
THIRD_PARTY_APPS = [
    "allauth",
    "allauth.account",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    # Helix (its README: the three apps; DRF is there already)
    "streams",
    "workers",
    "chat",
]
LOCAL_APPS = ["shop.users", "shop.concierge"]
INSTALLED_APPS = DJANGO_APPS + THIRD_PARTY_APPS + LOCAL_APPS

# Sign-in with an e-mail address, through allauth.
AUTH_USER_MODEL = "users.User"
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
LOGIN_REDIRECT_URL = "support"
LOGIN_URL = "account_login"
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_USER_MODEL_USERNAME_FIELD = None
ACCOUNT_EMAIL_VERIFICATION = "mandatory"
SITE_ID = 1


MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
]

STATIC_ROOT = str(Path(os.environ.get("SHOP_STATIC_ROOT", BASE_DIR / "staticfiles")))
STATIC_URL = "/static/"
STATICFILES_DIRS = [str(APPS_DIR / "static")] + (
    [os.environ["SHOP_EXTRA_STATIC"]] if os.environ.get("SHOP_EXTRA_STATIC") else []
)

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [str(APPS_DIR / "templates")],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.debug",
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

# JavaScript reads no cookie of the shop: pages hand their CSRF token over in a meta tag.
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

REDIS_URL = os.environ["REDIS_URL"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}

# The shop's own Celery app (config/celery_app.py) and queues: its tasks go to "default";
# Helix's go to Helix's queue, which the workers consume too.
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_TIME_LIMIT = 5 * 60
CELERY_TASK_SOFT_TIME_LIMIT = 60
CELERY_WORKER_SEND_TASK_EVENTS = True
CELERY_TASK_SEND_SENT_EVENT = True
# Helix's README: workers ride out a full Redis, a visibility timeout longer than a run may take,
# and the reaper on beat.
CELERY_BROKER_TRANSPORT = "workers.broker:RedisTransport"
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 2400}
CELERY_BEAT_SCHEDULE = {"helix-reap-runs": {"task": "helix.reap_runs", "schedule": 1.0}}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": (
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ),
    "DEFAULT_PERMISSION_CLASSES": ("rest_framework.permissions.IsAuthenticated",),
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Shop API",
    "VERSION": "1.0.0",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAdminUser"],
}

HELIX = {
    "STREAMS": {"BACKEND": "redis", "OPTIONS": {"url": REDIS_URL}},
    "EXECUTOR": "celery",
    "CELERY_QUEUE": os.environ.get("HELIX_QUEUE", "helix"),
    "AGENT_MODULES": ["shop.concierge.agents"],
    "DEFAULT_AGENT": "concierge",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"level": "INFO", "handlers": ["console"]},
}
