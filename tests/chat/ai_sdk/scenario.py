"""A chat session holding a finished earlier turn and a current run cut at any chunk: the
stores a snapshot and a resumed stream read, plus what the real client receives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from chat.ai_sdk.messages import PARTIAL_SUFFIX, convert_to_ui_messages, merge_assistant_messages
from chat.ai_sdk.snapshot import SnapshotDeps, build_snapshot
from chat.ai_sdk.sse import ui_message_stream
from chat.ai_sdk.state import InMemoryStateStore, RunInfo
from chat.ai_sdk.transformer import StreamTransformer
from chat.ai_sdk.ui_messages import (
    DynamicToolUIPart,
    ReasoningUIPart,
    StepStartUIPart,
    TextUIPart,
    UIMessage,
    UIMessagePart,
)
from streams.backends import InMemoryStreamManager
from streams.messages import StoredMessage
from tests.chat.ai_sdk.runs import BuiltRun, RunSpec, build_run

SESSION = "session-1"
QUESTION = "What happened?"


async def collect(body: Any) -> bytes:
    return b"".join([part async for part in body])


@dataclass
class Scenario:
    """Built with :meth:`create`; ``cut`` chunks of the current run are written so far."""

    spec: RunSpec
    run: BuiltRun
    previous: BuiltRun | None
    manager: InMemoryStreamManager
    store: InMemoryStateStore
    start_sequence: int
    message_offset: int
    written: int = 0
    committed: int = 0

    @classmethod
    async def create(cls, spec: RunSpec, previous: RunSpec | None = None) -> Scenario:
        manager = InMemoryStreamManager()
        store = InMemoryStateStore()
        store.create_session(SESSION)
        writer = await manager.create_writer(SESSION, "web")
        built_previous = None
        if previous is not None:
            store.append_messages(SESSION, [StoredMessage(role="user", id="u0", content="Earlier question")])
            built_previous = build_run(previous, 1)
            await writer.write_many(built_previous.chunks)
            store.append_messages(SESSION, built_previous.messages)
            await manager.end_stream(SESSION)
            await manager.reopen_stream(SESSION)
        store.append_messages(SESSION, [StoredMessage(role="user", id="u1", content=QUESTION)])
        offset = len((await store.get_messages(SESSION)).messages)
        info = await manager.get_stream_info(SESSION)
        assert info is not None
        scenario = cls(spec, build_run(spec, offset), built_previous, manager, store, info.latest_sequence, offset)
        scenario._set_run(0, "running")
        return scenario

    def _set_run(self, step_count: int, status: str) -> None:
        run = RunInfo(
            run_id=self.spec.agent_id,
            status=status,  # type: ignore[arg-type]
            start_sequence=self.start_sequence,
            step_count=step_count,
            message_id=self.spec.message_id,
            message_offset=self.message_offset,
        )
        self.store.set_run(SESSION, run)

    @property
    def run_info(self) -> RunInfo:
        run = self.store._sessions[SESSION].run
        assert run is not None
        return run

    async def advance(self, count: int, *, commit_early: bool = False) -> None:
        """Write the run's chunks up to index ``count``. A step's messages are committed right
        before its ``step_committed`` chunk is written; with ``commit_early`` also when the cut
        falls exactly there (the commit done, its chunk not yet written)."""
        writer = await self.manager.create_writer(SESSION, "run")
        for index in range(self.written, count):
            self._commit_if_due(index)
            await writer.write(self.run.chunks[index])
        self.written = count
        if commit_early:
            self._commit_if_due(count)

    def _commit_if_due(self, index: int) -> None:
        steps = self.run.steps
        if self.committed < len(steps) and steps[self.committed][1] == index:
            self.store.append_messages(SESSION, steps[self.committed][0])
            self.committed += 1
            self._set_run(self.committed, "running")

    async def finish(self) -> None:
        await self.advance(len(self.run.chunks))
        self._set_run(len(self.run.steps), "completed")
        await self.manager.end_stream(SESSION)

    # -- views -----------------------------------------------------------------------------------

    def deps(self, content_replay: bool = True) -> SnapshotDeps:
        return SnapshotDeps(self.store, self.manager, content_replay)

    async def snapshot(self, content_replay: bool = True) -> dict[str, Any]:
        snapshot = await build_snapshot(self.deps(content_replay), SESSION)
        assert snapshot is not None
        return msgspec.to_builtins(snapshot)  # type: ignore[no-any-return]  # the JSON a page receives

    def page_messages(self) -> list[dict[str, Any]]:
        """The UI messages a page shows before the current run: the earlier turn."""
        messages: list[StoredMessage] = []
        if self.previous is not None:
            messages = [StoredMessage(role="user", id="u0", content="Earlier question"), *self.previous.messages]
        return msgspec.to_builtins(merge_assistant_messages(convert_to_ui_messages(messages)))  # type: ignore[no-any-return]

    async def live_body(self) -> bytes:
        """The POST response: the whole run as the transformer streams it."""
        reader = await self.manager.create_resumable_reader(SESSION, self.start_sequence)
        assert reader is not None
        transformer = StreamTransformer(message_id=self.spec.message_id)
        return await collect(ui_message_stream(reader.batches(), transformer))

    def stored_reply(self) -> dict[str, Any]:
        """The assistant reply as loaded from the stored messages after the run."""
        messages = self.store._sessions[SESSION].messages
        return msgspec.to_builtins(merge_assistant_messages(convert_to_ui_messages(messages))[-1])  # type: ignore[no-any-return]


def strict_view(message: dict[str, Any]) -> dict[str, Any]:
    """A message compared part by part: only reasoning block ids, which storage cannot know, go."""
    parts = [{k: v for k, v in p.items() if not (p["type"] == "reasoning" and k == "id")} for p in message["parts"]]
    return {"id": message["id"], "role": message["role"], "parts": parts}


def content_view(message: dict[str, Any]) -> dict[str, Any]:
    """A message compared by content: adjacent text (or reasoning) parts joined, part states and
    the ``-partial`` id suffix ignored; every character and tool result must still match."""
    parts: list[dict[str, Any]] = []
    for part in strict_view(message)["parts"]:
        part = dict(part)
        if part["type"] in ("text", "reasoning"):
            part.pop("state", None)
            if parts and parts[-1]["type"] == part["type"]:
                parts[-1]["text"] += part["text"]
                continue
        parts.append(part)
    return {"id": message["id"].removesuffix(PARTIAL_SUFFIX), "role": message["role"], "parts": parts}


_PARTS: dict[str, type[UIMessagePart]] = {
    "text": TextUIPart,
    "reasoning": ReasoningUIPart,
    "dynamic-tool": DynamicToolUIPart,
    "step-start": StepStartUIPart,
}


def ui_message(message: dict[str, Any]) -> UIMessage:
    """A message the client holds, decoded strictly into the server's types (a part of a kind or
    with a field the server never sends fails here)."""
    parts = [msgspec.convert(part, _PARTS[part["type"]]) for part in message["parts"]]
    return UIMessage(id=message["id"], role=message["role"], parts=parts, metadata=message.get("metadata"))


def last_reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The client's last assistant reply, its consecutive assistant messages merged as a snapshot
    merges them."""
    merged = merge_assistant_messages([ui_message(message) for message in messages])
    assert merged[-1].role == "assistant", merged
    return msgspec.to_builtins(merged[-1])  # type: ignore[no-any-return]
