"""The site's own floor for the reconnect storm: the demo site exactly as Helix is served (its
ASGI application, settings and middleware), with one more URL, ``/hello``, an async Django view
answering ``"ok"`` (:mod:`bench.site_floor_urls`). What a request costs there is what Django and
the site's middleware cost any request of this site; a resume's cost beyond it is Helix's.

The settings module of its server process (``DJANGO_SETTINGS_MODULE=bench.site_floor``).
"""

from helix_site.settings import *  # noqa: F403  (the demo site's settings, unchanged but the URLconf)

ROOT_URLCONF = "bench.site_floor_urls"
