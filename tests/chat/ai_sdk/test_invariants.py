"""Invariants of the bridge over random runs, checked in the real AI SDK client.

Runs mix reasoning, text, parallel tool calls (failing, with bad or streamed arguments), custom
events, sub-agents, state patches and several steps, after an earlier turn of the session.
"""

from __future__ import annotations

import asyncio
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat.ai_sdk.resume import resume_run_stream
from tests.chat.ai_sdk.client import ChatClient, sse_response
from tests.chat.ai_sdk.runs import RunSpec, run_specs
from tests.chat.ai_sdk.scenario import QUESTION, SESSION, Scenario, collect, content_view, last_reply, strict_view

EXAMPLES = settings(
    max_examples=int(os.environ.get("HELIX_HYPOTHESIS_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _assemble(chat_client: ChatClient, client: str, action: dict, messages: list) -> dict:  # type: ignore[type-arg]
    answer = chat_client.run(client, [action], messages)
    assert answer["error"] is None and answer["errors"] == [], answer
    return last_reply(answer["messages"])


@EXAMPLES
@given(spec=run_specs(run_number=2), previous=st.one_of(st.none(), run_specs(run_number=1)))
def test_the_live_message_equals_the_stored_one(
    chat_client: ChatClient, spec: RunSpec, previous: RunSpec | None
) -> None:
    async def body() -> tuple[Scenario, bytes]:
        scenario = await Scenario.create(spec, previous)
        await scenario.finish()
        return scenario, await scenario.live_body()

    scenario, live = asyncio.run(body())
    stored = strict_view(scenario.stored_reply())
    for client in ("v6", "v6-strict", "v7"):
        action = {"kind": "send", "text": QUESTION, "response": sse_response(live)}
        assert strict_view(_assemble(chat_client, client, action, scenario.page_messages())) == stored, client


@EXAMPLES
@given(
    spec=run_specs(run_number=2),
    previous=st.one_of(st.none(), run_specs(run_number=1)),
    where=st.floats(0, 1),
    commit_early=st.booleans(),
    replay=st.booleans(),
)
def test_a_resume_at_any_cut_assembles_the_same_message(
    chat_client: ChatClient, spec: RunSpec, previous: RunSpec | None, where: float, commit_early: bool, replay: bool
) -> None:
    async def resumed() -> tuple[Scenario, dict, bytes, bytes]:  # type: ignore[type-arg]
        scenario = await Scenario.create(spec, previous)
        cut = round(where * len(scenario.run.chunks))
        await scenario.advance(cut, commit_early=commit_early)
        snapshot = await scenario.snapshot(content_replay=replay)
        run = scenario.run_info
        await scenario.finish()
        at_position = await resume_run_stream(
            scenario.manager, SESSION, run, snapshot["streamSequence"], content_replay=replay
        )
        no_position = await resume_run_stream(scenario.manager, SESSION, run, None, content_replay=replay)
        assert at_position is not None and no_position is not None
        return scenario, snapshot, await collect(at_position), await collect(no_position)

    scenario, snapshot, body, full_replay = asyncio.run(resumed())
    stored = scenario.stored_reply()
    view = strict_view if replay else content_view
    for client in ("v6", "v6-strict"):
        reply = _assemble(chat_client, client, {"kind": "resume", "response": sse_response(body)}, snapshot["messages"])
        assert view(reply) == view(stored), client
    if replay:  # what useChat({resume: true}) gets: the whole run from its first chunk
        for client in ("v6", "v6-strict"):
            action = {"kind": "resume", "response": sse_response(full_replay)}
            assert strict_view(_assemble(chat_client, client, action, snapshot["messages"])) == strict_view(stored)
