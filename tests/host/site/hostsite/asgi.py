"""ASGI config of hostsite: Django, with Helix's resumed chat streams served off Django's threads."""

import os

from django.core.asgi import get_asgi_application

from chat.http.asgi import StreamRouter

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostsite.settings")

application = StreamRouter(get_asgi_application())
