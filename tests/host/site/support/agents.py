"""The shop's own agent, registered through HELIX["AGENT_MODULES"]: a help desk that looks orders
up with a tool, then answers at length (long enough to drop the connection mid-answer)."""

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from streams.messages import StoredMessage
from workers.llm.scripted import ScriptedModel, ScriptedToolCall, ScriptedTurn
from workers.runtime.agents import define_agent, define_tool
from workers.runtime.context import ToolContext

ADVICE = [
    "Parcels usually arrive within two working days of shipping.",
    "You can change the delivery address until the courier picks the parcel up.",
    "Returns are free for thirty days, in the original packaging.",
    "Refunds reach your card within five working days of the return.",
    "Our support desk answers every message within one working day.",
]


class OrderInput(BaseModel):
    order: str = Field(min_length=1)


def order_status(args: OrderInput, context: ToolContext) -> dict[str, Any]:
    context.state["lookups"] = context.state.get("lookups", 0) + 1
    return {"order": args.order, "status": "shipped"}


lookup_order = define_tool("lookup_order", "Look up the status of an order.", OrderInput, order_status)


def helpdesk_script(messages: list[StoredMessage]) -> ScriptedTurn:
    last = messages[-1]
    if last.role == "tool":
        found = json.loads(last.content)
        summary = f"Order {found['order']} has {found['status']}."
        return ScriptedTurn(text=f"{summary} " + " ".join(ADVICE * 6))
    order = (re.findall(r"\d+", last.content) or ["1"])[0]
    return ScriptedTurn(
        reasoning="The customer asks about an order: look it up first.",
        text="Let me look that order up.",
        tool_calls=[ScriptedToolCall("lookup_order", {"order": order})],
    )


helpdesk = define_agent(
    "helpdesk",
    "You are the shop's help desk.",
    tools=[lookup_order],
    llm=lambda: ScriptedModel(helpdesk_script),
    description="Answers questions about orders.",
)
