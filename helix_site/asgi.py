"""ASGI entry point: ``daphne helix_site.asgi:application``.

HTTP goes to Django, except resumed streams, which ``chat.http.asgi`` serves without a
thread per open stream, and every response waits for slow clients (`chat.http.flow_control`);
the Channels router leaves room for more protocols. With ``DJANGO_DEBUG`` on, static files are
served too, so the embedded default needs no web server in front.
"""

import gc
import os

from django.core.asgi import get_asgi_application

# Thousands of open streams are a large, long-lived heap. With CPython's default thresholds the
# cyclic collector walks all of it each time it grows by a quarter: in a 5,000-client reconnect
# storm that was a quarter of the server's CPU, in pauses of up to half a second. Collecting
# young objects every 5,000 allocations instead of 700 makes every generation's collections
# rarer (see the README's deployment section).
gc.set_threshold(5_000, 10, 10)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "helix_site.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402  (after Django is set up)
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from chat.http.asgi import StreamRouter  # noqa: E402

# Resumed streams skip Django's per-request thread (see chat.http.asgi); the rest is Django.
http_app = StreamRouter(ASGIStaticFilesHandler(django_asgi_app) if settings.DEBUG else django_asgi_app)
application = ProtocolTypeRouter({"http": http_app})

# What start-up made (Django's apps, URLconf, views, settings: about 134,000 tracked objects)
# lives as long as the process: out of the collector's sight from now on. A full collection in a
# reconnect storm then walks the streams' objects alone (in-process, 3,000 resumes: 35 ms instead
# of about 200; see the README's deployment section).
gc.collect()
gc.freeze()
