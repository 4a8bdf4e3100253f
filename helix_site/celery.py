"""The Celery application of the site; configured from Django settings prefixed ``CELERY_``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "helix_site.settings")

app = Celery("helix_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
