"""The shop's ASGI application, as Helix's README says to write it; served by gunicorn with
uvicorn workers (``gunicorn config.asgi:application -k uvicorn_worker.UvicornWorker``)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
application = get_asgi_application()

from chat.http import daphne_limits  # noqa: E402
from chat.http.asgi import HelixLimits  # noqa: E402

daphne_limits.install()  # does nothing under uvicorn
application = HelixLimits(application)
