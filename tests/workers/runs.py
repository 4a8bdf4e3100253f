"""Helpers to run agents end to end and look at what they left behind."""

from __future__ import annotations

from typing import Any

import msgspec

from chat.ai_sdk.snapshot import SnapshotDeps, build_snapshot
from chat.ai_sdk.sse import ui_message_stream
from chat.ai_sdk.transformer import StreamTransformer
from chat.state.store import DjangoStateStore
from streams.backends.base import StreamManager
from tests.chat.ai_sdk.client import ChatClient, sse_response
from tests.chat.ai_sdk.scenario import collect, last_reply, strict_view


async def live_body(streams: StreamManager, session_id: str, start_sequence: int, message_id: str) -> bytes:
    """The run's SSE response as the transformer streams it from the store."""
    reader = await streams.create_resumable_reader(session_id, start_sequence)
    assert reader is not None
    return await collect(ui_message_stream(reader.batches(), StreamTransformer(message_id=message_id)))


async def stored_reply(store: DjangoStateStore, streams: StreamManager, session_id: str) -> dict[str, Any]:
    snapshot = await build_snapshot(SnapshotDeps(store, streams), session_id)
    assert snapshot is not None
    return msgspec.to_builtins(snapshot.messages[-1])  # type: ignore[no-any-return]


def assert_live_equals_stored(chat_client: ChatClient, body: bytes, stored: dict[str, Any], question: str) -> None:
    """The real client's message from the live stream equals the stored one, in every client."""
    for client in ("v6", "v6-strict", "v7"):
        answer = chat_client.run(client, [{"kind": "send", "text": question, "response": sse_response(body)}])
        assert answer["error"] is None and answer["errors"] == [], answer
        assert strict_view(last_reply(answer["messages"])) == strict_view(stored), client
