"""The OpenAPI document describes every API URL."""

from __future__ import annotations

import re

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
