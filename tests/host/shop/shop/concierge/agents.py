"""The shop's concierge, registered through HELIX["AGENT_MODULES"]: it answers at length, a few
words at a time, long enough for a page to be reloaded mid-answer."""

from streams.messages import StoredMessage
from workers.llm.scripted import ScriptedModel, ScriptedTurn
from workers.runtime.agents import define_agent

OPENING = "Thank you for asking."
CLOSING = "Is there anything else I can help with?"
POLICIES = [
    "Orders placed before noon leave the warehouse on the same day.",
    "Every parcel carries a tracking number, sent by e-mail when it ships.",
    "Sizes can be exchanged in any store within sixty days.",
    "Gift cards never expire and work online and in stores.",
    "Members collect points on every order and spend them at checkout.",
    "Damaged items are replaced at no cost, shipping included.",
    "Our stores open at nine and close at seven, Monday to Saturday.",
    "Repairs are free during the two years of the warranty.",
]


def concierge_script(messages: list[StoredMessage]) -> ScriptedTurn:
    return ScriptedTurn(text=" ".join([OPENING, *POLICIES, CLOSING]))


concierge = define_agent(
    "concierge",
    "You are the shop's concierge.",
    llm=lambda: ScriptedModel(concierge_script, delay=(0.03, 0.03)),
    description="Answers questions about the shop.",
)
