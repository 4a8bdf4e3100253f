"""The Helix for Django site: settings, URLs, ASGI application and Celery app (wiring only)."""

from helix_site.celery import app as celery_app

__all__ = ["celery_app"]
