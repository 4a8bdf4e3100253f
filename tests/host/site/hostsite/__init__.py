"""A Django shop's own project that installs Helix from its wheel (``tests/host``)."""

# The Celery app is loaded when Django starts, so that @shared_task uses it.
from .celery import app as celery_app

__all__ = ("celery_app",)
