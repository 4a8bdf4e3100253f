"""The demo agents of the embedded default, on the deterministic scripted model.

``chat``: a few sentences per answer. ``tools``: a calculator and a slow search that reports
progress. ``research``: delegates to a ``researcher`` sub-agent, takes notes in its state, and
answers in several paragraphs over several steps, long enough to refresh or crash mid-run.
``assistant``: human in the loop. Sending an email waits for your approval; asking where you are
runs a tool in your browser (``get_location``) and waits for its result.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from streams.messages import StoredMessage
from workers.llm.scripted import ScriptedModel, ScriptedToolCall, ScriptedTurn, token_delay
from workers.runtime.agents import define_agent, define_tool
from workers.runtime.context import ToolContext

__all__ = ["assistant_agent", "chat_agent", "research_agent", "tools_agent"]

SENTENCES = [
    "Helix keeps every event of this answer in a stream with a sequence number.",
    "If you refresh the page now, the answer continues where you left it.",
    "Each step of an agent is committed to the database before the stream says so.",
    "Sessions, runs and messages are ordinary Django models you can browse in the admin.",
    "A worker that dies mid-answer is replaced, and the stream tells your browser to resync.",
    "Tools run in parallel, and their progress arrives as data events.",
    "The same question always gets the same answer from this scripted model.",
    "Nothing you see here needs an API key or an external service.",
]


def _pick(text: str, count: int) -> list[str]:
    seed = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    return [SENTENCES[(seed >> (index * 5)) % len(SENTENCES)] for index in range(count)]


def _last_user(messages: list[StoredMessage]) -> str:
    return next((m.content for m in reversed(messages) if m.role == "user"), "")


def _tool_results(messages: list[StoredMessage]) -> dict[str, Any]:
    """Results of the latest step's tool calls, by tool name."""
    results: dict[str, Any] = {}
    assistant = next((m for m in reversed(messages) if m.role == "assistant"), None)
    names = {c.id: c.name for c in assistant.tool_calls} if assistant else {}
    for message in messages:
        if message.role == "tool" and message.tool_call_id in names:
            try:
                results[names[message.tool_call_id]] = json.loads(message.content)
            except ValueError:
                results[names[message.tool_call_id]] = message.content
    return results


# -- chat ----------------------------------------------------------------------------------------


def chat_script(messages: list[StoredMessage]) -> ScriptedTurn:
    question = _last_user(messages)
    sentences = _pick(question, 3)
    return ScriptedTurn(
        reasoning="The user wants a short, friendly answer.",
        text=f"You said: “{question[:60]}”. " + " ".join(sentences),
    )


chat_agent = define_agent(
    "chat",
    "You are a friendly assistant.",
    llm=lambda: ScriptedModel(chat_script),
    description="A scripted conversation: a few sentences per answer.",
)


# -- tools ---------------------------------------------------------------------------------------


class CalculatorInput(BaseModel):
    a: float
    b: float
    op: Literal["+", "-", "*", "/"] = "*"


def calculate(args: CalculatorInput, context: ToolContext) -> dict[str, float]:
    if args.op == "/" and args.b == 0:
        raise ZeroDivisionError("division by zero")
    value = {"+": args.a + args.b, "-": args.a - args.b, "*": args.a * args.b, "/": args.a / (args.b or 1)}[args.op]
    context.state["calculations"] = context.state.get("calculations", 0) + 1
    return {"value": value}


class SearchInput(BaseModel):
    query: str = Field(min_length=1)


async def slow_search(args: SearchInput, context: ToolContext) -> dict[str, Any]:
    low, high = token_delay()
    for done in range(1, 4):
        await asyncio.sleep((low + high) * 3)
        await context.emit("search_progress", {"query": args.query, "done": done, "total": 3})
    words = args.query.split()
    return {
        "query": args.query,
        "results": [f"{word.capitalize()} explained" for word in words[:3]] or ["Nothing found"],
    }


calculator = define_tool("calculator", "Compute a op b.", CalculatorInput, calculate)
search = define_tool("search", "Search the knowledge base (slow; reports progress).", SearchInput, slow_search)


def tools_script(messages: list[StoredMessage]) -> ScriptedTurn:
    results = _tool_results(messages) if messages and messages[-1].role == "tool" else {}
    if results:
        calc = results.get("calculator")
        found = results.get("search")
        value = calc.get("value") if isinstance(calc, dict) else calc
        hits = ", ".join(found.get("results", [])) if isinstance(found, dict) else "nothing"
        return ScriptedTurn(text=f"The result is {value}. The search found: {hits}.")
    question = _last_user(messages)
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", question)][:2] or [6.0, 7.0]
    a, b = [*numbers, 7.0][:2]
    op = "+" if "plus" in question or "+" in question else "*"
    return ScriptedTurn(
        reasoning="I will compute and search at the same time.",
        text="Let me work that out.",
        tool_calls=[
            ScriptedToolCall("calculator", {"a": a, "b": b, "op": op}),
            ScriptedToolCall("search", {"query": question[:40] or "helix"}),
        ],
    )


tools_agent = define_agent(
    "tools",
    "You answer with the help of tools.",
    tools=[calculator, search],
    llm=lambda: ScriptedModel(tools_script),
    description="A calculator and a slow search that emits progress events.",
)


# -- research ------------------------------------------------------------------------------------


def researcher_script(messages: list[StoredMessage]) -> ScriptedTurn:
    if messages and messages[-1].role == "tool":
        found = _tool_results(messages).get("search", {})
        hits = "; ".join(found.get("results", [])) if isinstance(found, dict) else ""
        return ScriptedTurn(text=f"Findings: {hits}. " + " ".join(_pick(hits, 2)))
    return ScriptedTurn(
        text="Searching.", tool_calls=[ScriptedToolCall("search", {"query": _last_user(messages)[:40]})]
    )


researcher = define_agent(
    "researcher",
    "You research one question and report findings.",
    tools=[search],
    llm=lambda: ScriptedModel(researcher_script),
    description="Research a question and report the findings.",
)


class NoteInput(BaseModel):
    note: str


def take_note(args: NoteInput, context: ToolContext) -> dict[str, int]:
    context.state.setdefault("notes", []).append(args.note)
    return {"notes": len(context.state["notes"])}


notes = define_tool("take_note", "Keep a note in the agent's state.", NoteInput, take_note)


def research_script(messages: list[StoredMessage]) -> ScriptedTurn:
    question = _last_user(messages)
    steps_done = sum(
        1
        for m in messages[messages.index(next(m for m in reversed(messages) if m.role == "user")) :]
        if m.role == "assistant"
    )
    if steps_done == 0:
        return ScriptedTurn(
            reasoning="This needs research first. I will delegate it and keep a note.",
            text="I will look into this properly.",
            tool_calls=[
                ScriptedToolCall("researcher", {"task": question[:80] or "helix"}),
                ScriptedToolCall("take_note", {"note": f"asked: {question[:40]}"}),
            ],
        )
    if steps_done == 1:
        return ScriptedTurn(
            reasoning="Let me check one more angle.",
            tool_calls=[ScriptedToolCall("search", {"query": f"{question[:30].strip()} details"})],
        )
    paragraphs = [" ".join(_pick(f"{question}:{index}", 4)) for index in range(4)]
    answer = "Here is what I found.\n\n" + "\n\n".join(paragraphs) + "\n\nThat is the whole picture."
    return ScriptedTurn(reasoning="I have enough to write the answer.", text=answer)


research_agent = define_agent(
    "research",
    "You research questions thoroughly and answer in several paragraphs.",
    tools=[researcher, notes, search],
    llm=lambda: ScriptedModel(research_script),
    max_steps=6,
    description="Delegates to a sub-agent, uses tools, answers in several paragraphs.",
)


# -- assistant: human in the loop -----------------------------------------------------------------


class EmailInput(BaseModel):
    to: str
    subject: str


def send_email(args: EmailInput, context: ToolContext) -> dict[str, Any]:
    context.state.setdefault("sent", []).append(args.subject)
    return {"sent": True, "to": args.to}


class LocationInput(BaseModel):
    precision: Literal["city", "exact"] = "city"


email = define_tool("send_email", "Send an email (asks you first).", EmailInput, send_email, needs_approval=True)
location = define_tool("get_location", "Where the user is, from the browser.", LocationInput)


def assistant_script(messages: list[StoredMessage]) -> ScriptedTurn:
    if messages and messages[-1].role == "tool":
        last = messages[-1]
        if last.metadata.get("denied"):
            return ScriptedTurn(text="Understood: I did not send it.")
        found = _tool_results(messages)
        if "get_location" in found:
            where = found["get_location"]
            city = where.get("city", "somewhere") if isinstance(where, dict) else str(where)
            return ScriptedTurn(text=f"You are in {city}.")
        return ScriptedTurn(text=f"Sent to {found.get('send_email', {}).get('to', 'them')}.")
    question = _last_user(messages)
    if "where" in question.lower():
        return ScriptedTurn(text="Let me ask your browser.", tool_calls=[ScriptedToolCall("get_location", {})])
    return ScriptedTurn(
        text="I will send that, once you approve.",
        tool_calls=[ScriptedToolCall("send_email", {"to": "team@example.com", "subject": question[:60]})],
    )


assistant_agent = define_agent(
    "assistant",
    "You help with errands; some of them need the user.",
    tools=[email, location],
    llm=lambda: ScriptedModel(assistant_script),
    description="Asks your approval before sending an email; finds where you are with a tool in your browser.",
)
