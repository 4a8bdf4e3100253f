"""The OpenAPI 3.1 description of the Helix chat API, served at ``schema`` under the mount prefix."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse

__all__ = ["SCHEMA", "schema_view"]

_error = {"$ref": "#/components/schemas/Error"}
_session = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "description": "Letters, digits, '-', '_', '.', ':' (no '..'); a UUID in any spelling is one id.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9_.:-]{1,128}$"},
}
_resume_headers = [
    {"name": name, "in": "header", "required": False, "schema": {"type": "integer", "minimum": 0}, "description": text}
    for name, text in (
        ("Last-Event-ID", "The last sequence received (the SSE id of the last event)."),
        ("X-Resume-From-Sequence", "The snapshot's streamSequence."),
        ("X-Resume-At", "Same, for clients that prefer this name."),
    )
]
_stream = {
    "description": "An AI SDK UI message stream (SSE). `id:` lines carry the stream sequence.",
    "headers": {"x-vercel-ai-ui-message-stream": {"schema": {"type": "string", "const": "v1"}}},
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def _errors(*codes: int) -> dict[str, Any]:
    descriptions = {
        400: "Invalid input (code VALIDATION_ERROR and friends).",
        401: "Authentication required.",
        403: "CSRF token missing (cookie-authenticated browsers).",
        404: "No such session, or not yours.",
        409: "The session has a run in flight (RUN_CONFLICT).",
        410: "The run failed (STREAM_FAILED).",
        413: "The body is too large.",
        429: "Rate limited; see Retry-After.",
    }
    return {
        str(code): {"description": descriptions[code], "content": {"application/json": {"schema": _error}}}
        for code in codes
    }


SCHEMA: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "Helix for Django chat API",
        "version": "1",
        "description": "Resumable agent chat for the Vercel AI SDK (UI message stream protocol v1).",
    },
    "components": {
        "securitySchemes": {
            "session": {"type": "apiKey", "in": "cookie", "name": "sessionid"},
            "token": {"type": "apiKey", "in": "header", "name": "Authorization", "description": "Token <key>"},
        },
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error", "code"],
                "properties": {"error": {"type": "string"}, "code": {"type": "string"}},
            },
            "ChatRequest": {
                "oneOf": [
                    {
                        "type": "object",
                        "description": "What DefaultChatTransport sends.",
                        "required": ["messages"],
                        "properties": {
                            "id": {"type": "string"},
                            "messages": {"type": "array", "items": {"type": "object"}},
                            "trigger": {"enum": ["submit-message", "regenerate-message"]},
                            "messageId": {"type": "string"},
                            "agent": {"type": "string"},
                        },
                    },
                    {
                        "type": "object",
                        "required": ["message"],
                        "properties": {
                            "message": {"type": "string"},
                            "messages": {
                                "type": "array",
                                "items": {"type": "object"},
                                "description": "Replaces the stored history: only for callers passing "
                                "HELIX['OVERRIDE_PERMISSION_CLASSES'] (else 400 OVERRIDE_NOT_ALLOWED).",
                            },
                            "state": {
                                "type": "object",
                                "description": "Replaces the stored state: same rule as messages.",
                            },
                            "agent": {"type": "string"},
                        },
                    },
                ]
            },
            "Snapshot": {
                "type": "object",
                "properties": {
                    "messages": {"type": "array", "items": {"type": "object"}},
                    "state": {"type": "object"},
                    "streamSequence": {"type": "integer"},
                    "startSequence": {"type": "integer"},
                    "status": {"enum": ["active", "paused", "ended", "failed"]},
                    "checkpointId": {"type": ["string", "null"]},
                    "stepCount": {"type": "integer"},
                    "existingMessageId": {"type": ["string", "null"]},
                    "timestamp": {"type": "integer"},
                },
            },
        },
    },
    "security": [{"session": []}, {"token": []}],
    "paths": {
        "/chat": {
            "post": {
                "summary": "Start a run in the session the body names (id or sessionId), or in a new one",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}},
                },
                "responses": {
                    "200": {**_stream, "headers": {"X-Session-Id": {"schema": {"type": "string"}}}},
                    **_errors(400, 401, 403, 404, 409, 413, 429),
                },
            },
        },
        "/chat/{session_id}": {
            "parameters": [_session],
            "post": {
                "summary": "Start or continue a run and stream it",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}},
                },
                "responses": {"200": _stream, **_errors(400, 401, 403, 404, 409, 413, 429)},
            },
            "get": {
                "summary": "Resume the current run",
                "parameters": _resume_headers,
                "responses": {
                    "200": _stream,
                    "204": {"description": "Nothing to resume."},
                    **_errors(400, 401, 404, 410),
                },
            },
            "delete": {
                "summary": "Delete the session",
                "responses": {"204": {"description": "Deleted."}, **_errors(401, 403, 404)},
            },
        },
        "/chat/{session_id}/stream": {
            "parameters": [_session],
            "get": {
                "summary": "Resume (the URL useChat({resume: true}) calls)",
                "parameters": _resume_headers,
                "responses": {
                    "200": _stream,
                    "204": {"description": "Nothing to resume."},
                    **_errors(400, 401, 404, 410),
                },
            },
        },
        "/chat/{session_id}/snapshot": {
            "parameters": [_session],
            "get": {
                "summary": "The session's snapshot",
                "parameters": [
                    {"name": "includePartialContent", "in": "query", "schema": {"type": "boolean"}},
                    {
                        "name": "checkpointId",
                        "in": "query",
                        "schema": {"type": "string"},
                        "description": "The session as this checkpoint left it (404 CHECKPOINT_NOT_FOUND if none).",
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The snapshot.",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Snapshot"}}},
                    },
                    **_errors(401, 404),
                },
            },
        },
        "/chat/{session_id}/messages": {
            "parameters": [_session],
            "get": {
                "summary": "A page of UI messages",
                "parameters": [
                    {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
                ],
                "responses": {
                    "200": {"description": "`{messages, hasMore, offset, limit, total}`: one message per reply"},
                    **_errors(400, 401, 404),
                },
            },
        },
        "/chat/{session_id}/stop": {
            "parameters": [_session],
            "post": {
                "summary": "Stop the run at its next safe point",
                "responses": {
                    "202": {"description": "Stopping."},
                    "200": {"description": "Nothing to stop."},
                    **_errors(401, 403, 404),
                },
            },
        },
        "/chat/{session_id}/feed": {
            "parameters": [_session],
            "get": {
                "summary": "The session's feed: its runs starting, pausing, going on, ending (one per tab)",
                "responses": {
                    "200": {
                        "description": (
                            "Server-sent events, open until the client leaves: `event: run` with "
                            "`{status, runId, streamSequence}` whenever the session's run changes "
                            "hands or state, and keep-alive comments between them."
                        ),
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    **_errors(401, 404),
                },
            },
        },
        "/sessions": {
            "get": {
                "summary": "The caller's sessions",
                "parameters": [
                    {"name": "offset", "in": "query", "schema": {"type": "integer"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "maximum": 100}},
                ],
                "responses": {"200": {"description": "`{count, next, previous, results}`"}, **_errors(401)},
            }
        },
        "/agents": {
            "get": {
                "summary": "The agents a chat may name",
                "responses": {"200": {"description": "`[{name, description}]`"}, **_errors(401)},
            }
        },
        "/schema": {
            "get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI 3.1"}}}
        },
    },
}


def schema_view(request: HttpRequest) -> JsonResponse:
    """GET: the OpenAPI description; its server is the prefix the site mounted the API at."""
    prefix = request.path[: -len("schema")] if request.path.endswith("schema") else "/"
    return JsonResponse({**SCHEMA, "servers": [{"url": prefix.rstrip("/") or "/"}]})
