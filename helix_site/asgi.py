"""ASGI entry point: ``daphne helix_site.asgi:application`` (or ``uvicorn``).

Every HTTP request is Django's, through the site's middleware; :class:`~chat.http.asgi.HelixLimits`
gives Helix's endpoints their body cap, backpressure and stall bound, and under Daphne the site
opts into Daphne's own limits (:mod:`chat.http.daphne_limits`). The Channels router leaves room
for more protocols. With ``DJANGO_DEBUG`` on, static files are served too, so the embedded
default needs no web server in front.
"""

import gc
import os

from django.core.asgi import get_asgi_application

# Thousands of open streams are a large, long-lived heap. With CPython's default thresholds the
# cyclic collector walks all of it each time it grows by a quarter. Collecting young objects
# every 5,000 allocations instead of 700 makes every generation's collections rarer (see
# docs/deployment.md): this site's choice, as any site's.
gc.set_threshold(5_000, 10, 10)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "helix_site.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402  (after Django is set up)
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from chat.http import daphne_limits  # noqa: E402
from chat.http.asgi import HelixLimits  # noqa: E402

daphne_limits.install()  # under Daphne: bodies capped and header deadlines, before any view
http_app = HelixLimits(ASGIStaticFilesHandler(django_asgi_app) if settings.DEBUG else django_asgi_app)
application = ProtocolTypeRouter({"http": http_app})

# What start-up made (Django's apps, URLconf, views, settings) lives as long as the process: out
# of the collector's sight from now on.
gc.collect()
gc.freeze()
