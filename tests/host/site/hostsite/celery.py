"""The project's Celery app, as Django's and Celery's documentation set it up."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostsite.settings")

app = Celery("hostsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
