"""WSGI config of hostsite (the shop's pages; Helix's streams need the ASGI application)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostsite.settings")

application = get_wsgi_application()
