# The shop's Celery app is loaded with Django, so that @shared_task binds to it.
from .celery_app import app as celery_app

__all__ = ("celery_app",)
