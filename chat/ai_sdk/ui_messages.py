"""AI SDK UI messages and their parts, as typed structs: what snapshots and the messages API return.

Mirrors ``UIMessage``, ``UIMessagePart`` and the part types in ``packages/ai/src/ui/ui-messages.ts``
of ``ai@6.0.322`` (the version pinned in ``tests/js/package.json``). Parts are tagged by ``type``;
Python names are snake_case, camelCase on the wire; decoding rejects unknown fields. An optional
field (``?`` upstream) defaults to ``None`` and is then left out; where ``null`` is itself a value
(a tool's ``input`` or ``output``) the default is ``msgspec.UNSET``, which is left out too.

Upstream a tool part is a union discriminated by ``state``, each state with its own required
fields. msgspec discriminates on one field only, so :class:`DynamicToolUIPart` and
:class:`ToolUIPart` hold the fields of every state, in upstream's order; the state decides which
are set. A static tool part (``tool-<name>``) and a data part (``data-<name>``) carry a name in
``type``, so they have ``type`` as a plain field and stand outside the tagged union:
:data:`UIMessagePart` encodes; it does not decode.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

from chat.ai_sdk.events import ProviderMetadata, SourceDocumentChunk, SourceUrlChunk

__all__ = [
    "DataUIPart",
    "DynamicToolUIPart",
    "FileUIPart",
    "ReasoningUIPart",
    "SourceDocumentUIPart",
    "SourceUrlUIPart",
    "StepStartUIPart",
    "TextUIPart",
    "ToolApproval",
    "ToolState",
    "ToolUIPart",
    "UIMessage",
    "UIMessagePart",
    "UIRole",
]

UIRole: TypeAlias = Literal["system", "user", "assistant"]
PartState: TypeAlias = Literal["streaming", "done"]
ToolState: TypeAlias = Literal[
    "input-streaming",
    "input-available",
    "approval-requested",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
]


class _Struct(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True):
    """Options every struct here shares (``kw_only`` is not inherited: classes that need it say so)."""


class _Part(_Struct, tag_field="type"):
    """A part of a message, tagged by ``type``."""


class TextUIPart(_Part, tag="text"):
    text: str
    state: PartState | None = None
    provider_metadata: ProviderMetadata | None = None


class ReasoningUIPart(_Part, tag="reasoning", kw_only=True):
    id: str | None = None
    text: str
    state: PartState | None = None
    provider_metadata: ProviderMetadata | None = None


SourceUrlUIPart: TypeAlias = SourceUrlChunk
"""A ``source-url`` part: upstream gives it exactly the fields of its chunk."""

SourceDocumentUIPart: TypeAlias = SourceDocumentChunk
"""A ``source-document`` part: exactly the fields of its chunk."""


class FileUIPart(_Part, tag="file", kw_only=True):
    media_type: str
    filename: str | None = None
    url: str
    provider_metadata: ProviderMetadata | None = None


class StepStartUIPart(_Part, tag="step-start"):
    """A step boundary."""


class DataUIPart(_Struct, kw_only=True):
    type: str  # data-<name>
    id: str | None = None
    data: Any


class ToolApproval(_Struct):
    """The approval of a call: ``approved`` is unset while it is requested."""

    id: str
    approved: bool | None = None
    descriptor: Any = msgspec.UNSET
    reason: str | None = None
    signature: str | None = None
    input_schema_input: Any = msgspec.UNSET


class _ToolInvocation(_Struct, kw_only=True):
    """``UIToolInvocation``: the fields of a tool part in every state."""

    tool_call_id: str
    title: str | None = None
    tool_metadata: dict[str, Any] | None = None
    provider_executed: bool | None = None
    state: ToolState
    input: Any = msgspec.UNSET  # set in every state but input-streaming
    raw_input: Any = msgspec.UNSET
    input_encoding: Literal["json", "text"] | None = None
    output: Any = msgspec.UNSET  # output-available
    error_text: str | None = None  # output-error
    call_provider_metadata: ProviderMetadata | None = None
    result_provider_metadata: ProviderMetadata | None = None
    preliminary: bool | None = None
    approval: ToolApproval | None = None  # set from approval-requested on


class DynamicToolUIPart(_ToolInvocation, tag_field="type", tag="dynamic-tool"):
    """A call of a tool the client has no type for, named in ``toolName``."""

    tool_name: str
    dynamic: Literal[False] | None = None  # false: a static part normalised to a dynamic one


class ToolUIPart(_ToolInvocation):
    """A call of a tool the client knows by name: ``type`` is ``tool-<name>``."""

    type: str


UIMessagePart: TypeAlias = (
    TextUIPart
    | ReasoningUIPart
    | ToolUIPart
    | DynamicToolUIPart
    | SourceUrlUIPart
    | SourceDocumentUIPart
    | FileUIPart
    | DataUIPart
    | StepStartUIPart
)


class UIMessage(_Struct):
    """One message as ``useChat`` holds it. (``metadata`` comes last on the wire here; upstream
    declares it before ``parts``, which changes nothing for a JSON reader.)"""

    id: str
    role: UIRole
    parts: list[UIMessagePart]
    metadata: Any = None
