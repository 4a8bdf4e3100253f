"""The OpenAPI document describes every API URL."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from chat import urls


def test_every_api_url_is_documented(client: Client) -> None:
    schema = client.get("/api/schema").json()
    assert schema["openapi"].startswith("3.1")
    assert schema["servers"] == [{"url": "/api"}]  # the prefix the demo site mounts the API at
    routes = {"/" + re.sub(r"<str:(\w+)>", r"{\1}", str(pattern.pattern)) for pattern in urls.urlpatterns}
    assert routes == set(schema["paths"])
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method != "parameters":
                assert operation["summary"] and operation["responses"], (path, method)


def test_a_site_schema_built_by_drf_spectacular_leaves_helix_out_without_a_warning(settings: Any) -> None:
    """Helix describes its API in its own schema (above); a site that builds its OpenAPI with
    drf-spectacular (``spectacular --fail-on-warn``) gets no path and no warning from Helix's views."""
    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.generators import SchemaGenerator

    settings.REST_FRAMEWORK = {
        **getattr(settings, "REST_FRAMEWORK", {}),
        "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    }
    GENERATOR_STATS.reset()
    with GENERATOR_STATS.silence():
        schema = SchemaGenerator(urlconf="tests.chat.http.assistant_urls").get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    assert not GENERATOR_STATS, (dict(GENERATOR_STATS._warn_cache), dict(GENERATOR_STATS._error_cache))
    assert [path for path in schema["paths"] if path.startswith("/assistant/")] == []
