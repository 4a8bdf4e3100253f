"""Agents and tools, defined in Python, and the registry a task finds them in by name."""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from workers.exceptions import UnknownAgentError
from workers.llm.base import LLM, ToolDefinition

if TYPE_CHECKING:
    from workers.runtime.context import ToolContext

__all__ = [
    "Agent",
    "SubAgentTask",
    "Tool",
    "agent_names",
    "define_agent",
    "define_tool",
    "get_agent",
    "register_agent",
]

ToolExecute = Callable[[Any, "ToolContext"], Awaitable[Any] | Any]


class SubAgentTask(BaseModel):
    """The input of a sub-agent tool."""

    task: str = Field(description="What the sub-agent should do, in plain words.")


@dataclass(frozen=True)
class Tool:
    """A tool the model can call: ``execute(input, context)`` gets the validated input model.

    Without ``execute`` the tool runs in the browser (a client tool): the run pauses until the
    client sends its result. With ``needs_approval`` the run pauses until a person approves or
    denies the call; only then does it execute (or not). With ``agent`` (and no ``execute``) the
    runtime runs that agent as a sub-agent: its output is the tool's result.
    """

    name: str
    description: str
    input_schema: type[BaseModel]
    execute: ToolExecute | None
    agent: Agent | None = None
    needs_approval: bool = False

    @property
    def runs_on_client(self) -> bool:
        return self.execute is None and self.agent is None

    def definition(self) -> ToolDefinition:
        return ToolDefinition(self.name, self.description, self.input_schema.model_json_schema())


@dataclass(frozen=True)
class Agent:
    """An agent: a system prompt, a model, tools (sub-agents included) and limits."""

    name: str
    system_prompt: str
    llm: LLM | Callable[[], LLM]
    tools: tuple[Tool, ...] = ()
    output_schema: type[BaseModel] | None = None
    max_steps: int = 10
    description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def model(self) -> LLM:
        return self.llm if isinstance(self.llm, LLM) else self.llm()

    def tool(self, name: str) -> Tool | None:
        return next((tool for tool in self.tools if tool.name == name), None)

    def as_tool(self, description: str | None = None, input_schema: type[BaseModel] | None = None) -> Tool:
        """This agent as a tool of another agent (a sub-agent): its input is a task text."""
        return Tool(
            name=self.name,
            description=description or self.description or f"Delegate a task to the {self.name} agent.",
            input_schema=input_schema or SubAgentTask,
            execute=None,
            agent=self,
        )


def define_tool(
    name: str,
    description: str,
    input_schema: type[BaseModel],
    execute: ToolExecute | None = None,
    *,
    needs_approval: bool = False,
) -> Tool:
    """A tool; ``execute`` may be sync or async and receives ``(input, context)``. Leave it out
    for a tool the browser runs; ``needs_approval`` gates every call on a person's decision."""
    if not (inspect.isclass(input_schema) and issubclass(input_schema, BaseModel)):
        raise TypeError("input_schema must be a pydantic model class")
    if execute is None and needs_approval:
        raise ValueError("a client tool is approved by the person running it: needs_approval is for server tools")
    return Tool(
        name=name, description=description, input_schema=input_schema, execute=execute, needs_approval=needs_approval
    )


def define_agent(
    name: str,
    system_prompt: str,
    tools: Iterable[Tool | Agent] = (),
    llm: LLM | Callable[[], LLM] | None = None,
    output_schema: type[BaseModel] | None = None,
    max_steps: int = 10,
    *,
    description: str = "",
    register: bool = True,
) -> Agent:
    """An agent, registered under ``name`` unless ``register=False``. Agents in ``tools`` become
    sub-agent tools. Without ``llm`` the OpenAI-compatible adapter configured in settings is used."""
    if llm is None:
        from workers.llm.openai import OpenAIChatModel

        llm = OpenAIChatModel.from_settings
    if max_steps < 1:
        raise ValueError("max_steps must be at least 1")
    resolved = tuple(item.as_tool() if isinstance(item, Agent) else item for item in tools)
    names = [tool.name for tool in resolved]
    if len(names) != len(set(names)):
        raise ValueError(f"agent {name!r} has two tools with the same name")
    agent = Agent(name, system_prompt, llm, resolved, output_schema, max_steps, description)
    if register:
        register_agent(agent)
    return agent


_registry: dict[str, Agent] = {}
_lock = threading.Lock()
_loaded = False


#: Modules imported before the first lookup; they register agents when imported.
def register_agent(agent: Agent) -> None:
    with _lock:
        _registry[agent.name] = agent


def _load_modules() -> None:
    global _loaded
    if _loaded:
        return
    from streams.conf import helix_settings

    for module in helix_settings.AGENT_MODULES:
        importlib.import_module(module)
    _loaded = True


def get_agent(name: str) -> Agent:
    """The registered agent ``name``; raises :class:`UnknownAgentError`."""
    _load_modules()
    agent = _registry.get(name)
    if agent is None:
        raise UnknownAgentError(f"Unknown agent {name!r}; registered: {', '.join(sorted(_registry)) or 'none'}")
    return agent


def agent_names() -> list[str]:
    _load_modules()
    return sorted(_registry)
