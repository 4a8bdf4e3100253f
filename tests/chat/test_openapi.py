"""The OpenAPI document describes every API URL."""

from __future__ import annotations

import re

from django.test import Client
from django.urls import get_resolver


def test_every_api_url_is_documented(client: Client) -> None:
    schema = client.get("/api/schema").json()
    assert schema["openapi"].startswith("3.1")
    routes = {
        "/" + re.sub(r"<str:(\w+)>", r"{\1}", str(pattern.pattern))
        for pattern in get_resolver().url_patterns[1].url_patterns  # the chat include
        if str(pattern.pattern).startswith("api/")
    }
    assert routes == set(schema["paths"])
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method != "parameters":
                assert operation["summary"] and operation["responses"], (path, method)
