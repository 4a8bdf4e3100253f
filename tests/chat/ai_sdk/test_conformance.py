"""The bridge against the real AI SDK client: every emitted chunk accepted, and the message the
client assembles equal to the one loaded from storage, live and after a resume."""

from __future__ import annotations

import pytest

from chat.ai_sdk.resume import resume_run_stream
from tests.chat.ai_sdk.client import CLIENTS, ChatClient, sse_response
from tests.chat.ai_sdk.runs import RunSpec, StepSpec, ToolSpec
from tests.chat.ai_sdk.scenario import (
    QUESTION,
    SESSION,
    Scenario,
    collect,
    content_view,
    last_reply,
    strict_view,
)

RICH = RunSpec(
    steps=[
        StepSpec(
            reasoning=["The user wants ", "an order status."],
            text=["Let me ", "look that up."],
            tools=[
                ToolSpec("call-1", "lookup_order", {"order": 42}, {"status": "shipped"}, progress=True),
                ToolSpec("call-2", "search", {"q": "carrier"}, None, outcome="fail", subagent=True),
                ToolSpec("call-3", "calculate", {"n": 1}, outcome="bad_input"),
            ],
            streamed_arguments=True,
            patch=True,
        ),
        StepSpec(reasoning=["Done."], text=["Your order ", "shipped ✓."], tools=[]),
    ]
)
PREVIOUS = RunSpec(steps=[StepSpec(text=["Hi ", "there."])], agent_id="run-0", message_id="msg-run-0")


def assemble_live(chat_client: ChatClient, client: str, scenario: Scenario, body: bytes) -> dict:  # type: ignore[type-arg]
    answer = chat_client.run(
        client, [{"kind": "send", "text": QUESTION, "response": sse_response(body)}], scenario.page_messages()
    )
    assert answer["error"] is None and answer["errors"] == [], answer
    assert answer["status"] == "ready"
    return answer


@pytest.mark.parametrize("client", CLIENTS)
async def test_live_message_equals_the_stored_one(chat_client: ChatClient, client: str) -> None:
    scenario = await Scenario.create(RICH, PREVIOUS)
    await scenario.finish()
    answer = assemble_live(chat_client, client, scenario, await scenario.live_body())
    reply = last_reply(answer["messages"])
    assert strict_view(reply) == strict_view(scenario.stored_reply())
    assert [m["role"] for m in answer["messages"]] == ["user", "assistant", "user", "assistant"]
    kinds = [part["type"] for part in answer["data"]]
    assert "data-progress" in kinds and "data-subagent-chunk" in kinds and "data-step-committed" in kinds
    assert all(part.get("transient") for part in answer["data"])


async def _resumed_reply(
    chat_client: ChatClient, client: str, cut: int, *, replay: bool, position: bool = True, commit_early: bool = False
) -> tuple[dict, dict]:  # type: ignore[type-arg]
    scenario = await Scenario.create(RICH, PREVIOUS)
    await scenario.advance(cut, commit_early=commit_early)
    snapshot = await scenario.snapshot(content_replay=replay)
    run = scenario.run_info
    await scenario.finish()
    sequence = snapshot["streamSequence"] if position else None
    body = await resume_run_stream(scenario.manager, SESSION, run, sequence, content_replay=replay)
    assert body is not None
    answer = chat_client.run(
        client, [{"kind": "resume", "response": sse_response(await collect(body))}], snapshot["messages"]
    )
    assert answer["error"] is None and answer["errors"] == [], answer
    return last_reply(answer["messages"]), scenario.stored_reply()


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("cut", [0, 1, 3, 5, 9, 14, 20, 24, 27, 30])
async def test_resume_with_content_replay_at_any_cut(chat_client: ChatClient, client: str, cut: int) -> None:
    reply, stored = await _resumed_reply(chat_client, client, cut, replay=True)
    assert strict_view(reply) == strict_view(stored)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("cut", [0, 2, 5, 9, 14, 20, 24, 27, 30])
async def test_resume_without_replay_shows_each_thing_once(chat_client: ChatClient, client: str, cut: int) -> None:
    reply, stored = await _resumed_reply(chat_client, client, cut, replay=False)
    assert content_view(reply) == content_view(stored)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("cut", [4, 17, 26])
async def test_resume_with_no_position_replays_the_run(chat_client: ChatClient, client: str, cut: int) -> None:
    reply, stored = await _resumed_reply(chat_client, client, cut, replay=True, position=False)
    assert strict_view(reply) == strict_view(stored)
