"""Agents only the tests' servers load (HELIX_AGENT_MODULES)."""

from workers.exceptions import LLMError, RunErrorCode
from workers.llm.scripted import ScriptedModel, ScriptedTurn
from workers.runtime.agents import define_agent

broken = define_agent(
    "broken",
    "An agent whose model is down.",
    llm=lambda: ScriptedModel(
        lambda messages: ScriptedTurn(
            text="Starting",
            error=LLMError("the model is down", RunErrorCode.PROVIDER_OVERLOADED, True),
            error_after_tokens=1,
        )
    ),
)
