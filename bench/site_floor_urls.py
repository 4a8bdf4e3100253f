"""The URLconf of :mod:`bench.site_floor`: the demo site's URLs and ``/hello``."""

from django.http import HttpRequest, JsonResponse
from django.urls import include, path


async def hello(request: HttpRequest) -> JsonResponse:
    return JsonResponse("ok", safe=False)


urlpatterns = [path("hello", hello), path("", include("helix_site.urls"))]
