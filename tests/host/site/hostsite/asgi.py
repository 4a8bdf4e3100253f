"""ASGI config of hostsite: Django, with the limits of Helix's endpoints around it."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostsite.settings")

application = get_asgi_application()

from chat.http import daphne_limits  # noqa: E402  (after Django is set up)
from chat.http.asgi import HelixLimits  # noqa: E402

daphne_limits.install()
application = HelixLimits(application)
