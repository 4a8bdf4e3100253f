"""A local OpenAI-compatible server: ``POST /v1/chat/completions`` streams real chat-completion
SSE chunks from a scripted queue of responses, and records the requests it got."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion_chunks(
    *,
    reasoning: list[str] = (),  # type: ignore[assignment]
    content: list[str] = (),  # type: ignore[assignment]
    tool_calls: list[tuple[str, str, list[str]]] = (),  # type: ignore[assignment]
    usage: tuple[int, int] = (11, 7),
) -> list[dict[str, Any]]:
    """The chunks of one streamed completion: reasoning, content, tool calls with their argument
    text in fragments, then a finish chunk and a usage chunk (``stream_options.include_usage``)."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"reasoning_content": piece}) for piece in reasoning]
    chunks += [chunk({"content": piece}) for piece in content]
    for index, (call_id, name, fragments) in enumerate(tool_calls):
        first = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        chunks.append(chunk({"tool_calls": [first]}))
        chunks += [chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]}) for part in fragments]
    chunks.append(chunk({}, "tool_calls" if tool_calls else "stop"))
    chunks.append(
        {
            **base,
            "choices": [],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
        }
    )
    return chunks


class FakeOpenAI:
    """Queue responses with :meth:`respond` (a list of chunks to stream, or an HTTP status)."""

    def __init__(self) -> None:
        self.responses: list[list[dict[str, Any]] | int] = []
        self.requests: list[dict[str, Any]] = []
        self.server: ThreadingHTTPServer | None = None

    def respond(self, *responses: list[dict[str, Any]] | int) -> None:
        self.responses.extend(responses)

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                response = fake.responses.pop(0) if fake.responses else 500
                if isinstance(response, int):
                    payload = json.dumps({"error": {"message": f"status {response}", "type": "server_error"}}).encode()
                    self.send_response(response)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in response:
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

        return Handler

    @contextmanager
    def running(self) -> Iterator[FakeOpenAI]:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
