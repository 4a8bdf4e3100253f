"""The site's own floor for the reconnect storm: the demo site exactly as Helix is served (its
ASGI application, settings and middleware), with one more URL, ``/hello``, an async Django view
answering ``"ok"``. What a request costs there is what Django and the site's middleware cost any
request of this site; a resume's cost beyond it is Helix's.

Used as the settings module of its server process (``DJANGO_SETTINGS_MODULE=bench.site_floor``),
and as its URLconf.
"""

from django.http import HttpRequest, JsonResponse
from django.urls import include, path

from helix_site.settings import *  # noqa: F403  (the demo site's settings, unchanged but the URLconf)

ROOT_URLCONF = "bench.site_floor"


async def hello(request: HttpRequest) -> JsonResponse:
    return JsonResponse("ok", safe=False)


urlpatterns = [path("hello", hello), path("", include("helix_site.urls"))]
