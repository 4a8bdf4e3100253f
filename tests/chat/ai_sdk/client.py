"""The real AI SDK chat client, driven through ``tests/js/harness.mjs`` (one Node process per
test session). ``bin/test`` installs the pinned ``ai`` versions with ``npm ci``."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

HARNESS = Path(__file__).resolve().parents[2] / "js" / "harness.mjs"
LIVE_HARNESS = HARNESS.with_name("live.mjs")
CLIENTS = ("v6", "v6-strict", "v7")


class ChatClient:
    """Runs scripted chat sessions in the real client and returns what it assembled."""

    def __init__(self, script: Path = HARNESS) -> None:
        node_modules = HARNESS.parent / "node_modules"
        if not (node_modules / "ai-v6").is_dir():
            raise RuntimeError(f"the ai packages are not installed in {node_modules} (run bin/test)")
        self._process = subprocess.Popen(
            ["node", str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self._lock = threading.Lock()

    def run(
        self, client: str, actions: list[dict[str, Any]], messages: list[dict[str, Any]] | None = None, **extra: Any
    ) -> dict[str, Any]:
        request = {"client": client, "actions": actions, "messages": messages or [], **extra}
        with self._lock:
            assert self._process.stdin and self._process.stdout
            self._process.stdin.write(json.dumps(request) + "\n")
            line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the Node harness exited")
        answer: dict[str, Any] = json.loads(line)
        if "fatal" in answer:
            raise RuntimeError(answer["fatal"])
        return answer

    def close(self) -> None:
        if self._process.stdin:
            self._process.stdin.close()
        self._process.wait(10)


def sse_response(body: bytes | str, status: int = 200) -> dict[str, Any]:
    return {"status": status, "body": body.decode() if isinstance(body, bytes) else body}
