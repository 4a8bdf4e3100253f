"""The AI SDK UI message stream chunks, as typed structs: what the transformer and replay emit.

Mirrors ``UIMessageChunk`` and ``uiMessageChunkSchema`` in
``packages/ai/src/ui-message-stream/ui-message-chunks.ts`` of ``ai@6.0.322`` (the version pinned
in ``tests/js/package.json``): one class per chunk type, tagged by ``type``, fields in upstream's
order so the JSON keys come out as the SDK's own server writes them. Python names are snake_case,
camelCase on the wire. A field that is optional upstream (``?``) defaults to ``None`` and is then
left out (``omit_defaults``); a required one is always written, ``null`` included (``input``,
``output``, ``data``). Decoding is strict: unknown fields are rejected.

Strict clients (``ai`` 6.0.0 to 6.0.230; ``ai-v6-strict`` in the tests) reject a chunk holding any
key they do not know. The fields added after 6.0.0 are marked with the release that added them;
the bridge never sets them, so every 6.x client accepts what it sends. The chunk types ``ai`` 7
added (``reset-step``, ``custom``, ``reasoning-file``, ...) are left out: each fails every v6 client.

A ``data-<name>`` chunk carries its name in ``type``, so :class:`DataChunk` has ``type`` as a plain
field and stands outside the tagged union: :data:`UIMessageChunk` encodes; it does not decode.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

__all__ = [
    "AbortChunk",
    "DataChunk",
    "ErrorChunk",
    "FileChunk",
    "FinishChunk",
    "FinishReason",
    "FinishStepChunk",
    "MessageMetadataChunk",
    "ProviderMetadata",
    "ReasoningDeltaChunk",
    "ReasoningEndChunk",
    "ReasoningStartChunk",
    "SourceDocumentChunk",
    "SourceUrlChunk",
    "StartChunk",
    "StartStepChunk",
    "TextDeltaChunk",
    "TextEndChunk",
    "TextStartChunk",
    "ToolApprovalRequestChunk",
    "ToolInputAvailableChunk",
    "ToolInputDeltaChunk",
    "ToolInputErrorChunk",
    "ToolInputStartChunk",
    "ToolOutputAvailableChunk",
    "ToolOutputDeniedChunk",
    "ToolOutputErrorChunk",
    "UIMessageChunk",
]

ProviderMetadata: TypeAlias = dict[str, dict[str, Any]]
"""``{provider: {key: JSON}}``; a flat object is rejected by the client."""

FinishReason: TypeAlias = Literal["stop", "length", "content-filter", "tool-calls", "error", "other"]


class _Chunk(
    msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True, tag_field="type", gc=False
):
    """A UI message stream chunk: one SSE ``data:`` line."""


# -- text and reasoning ------------------------------------------------------------------------


class _ContentChunk(_Chunk, kw_only=True):
    """A chunk of content: ``providerMetadata`` comes last (keyword-only fields follow the
    chunk's own on the wire)."""

    provider_metadata: ProviderMetadata | None = None


class _BlockEdge(_ContentChunk):
    id: str


class _BlockDelta(_ContentChunk):
    id: str
    delta: str


class TextStartChunk(_BlockEdge, tag="text-start"):
    """Opens a new text part; ``id`` is the handle later deltas and the end name."""


class TextDeltaChunk(_BlockDelta, tag="text-delta"):
    """Appends to the open text part ``id`` (an error if there is none)."""


class TextEndChunk(_BlockEdge, tag="text-end"):
    """Marks the text part ``id`` done and closes the handle."""


class ReasoningStartChunk(_BlockEdge, tag="reasoning-start"):
    """Opens a new reasoning part (which keeps ``id``)."""


class ReasoningDeltaChunk(_BlockDelta, tag="reasoning-delta"):
    """Appends to the open reasoning part ``id``."""


class ReasoningEndChunk(_BlockEdge, tag="reasoning-end"):
    """Marks the reasoning part ``id`` done."""


class ErrorChunk(_Chunk, tag="error"):
    """The chat calls ``onError`` and ignores the rest of the stream."""

    error_text: str


# -- tools -------------------------------------------------------------------------------------


class _ToolCallChunk(_Chunk, kw_only=True):
    """The optional fields of the tool chunks. They are keyword-only, so they follow each chunk's
    own fields on the wire, where upstream declares them."""

    provider_executed: bool | None = None
    provider_metadata: ProviderMetadata | None = None  # 6.0.39+ on inputs, 6.0.120+ on outputs
    tool_metadata: dict[str, Any] | None = None  # 6.0.176+
    dynamic: bool | None = None


class _ToolInputChunk(_ToolCallChunk, kw_only=True):
    title: str | None = None


class ToolInputStartChunk(_ToolInputChunk, tag="tool-input-start"):
    """Creates the tool part in ``input-streaming``; ``dynamic`` picks the part kind it looks up."""

    tool_call_id: str
    tool_name: str
    input_encoding: Literal["json", "text"] | None = None  # 6.0.308+


class ToolInputDeltaChunk(_Chunk, tag="tool-input-delta"):
    """Raw input text, parsed as partial JSON by the client (an error without a start)."""

    tool_call_id: str
    input_text_delta: str


class ToolInputAvailableChunk(_ToolInputChunk, tag="tool-input-available"):
    """The complete input: the part becomes ``input-available`` (client tools run now)."""

    tool_call_id: str
    tool_name: str
    input: Any


class ToolInputErrorChunk(_ToolInputChunk, tag="tool-input-error"):
    """The input was rejected: the part becomes ``output-error``. (Upstream lists ``errorText``
    after ``dynamic``; it comes with the other required fields here, where Helix always sent it.)"""

    tool_call_id: str
    tool_name: str
    input: Any
    error_text: str


class ToolApprovalRequestChunk(_Chunk, tag="tool-approval-request"):
    """The part becomes ``approval-requested`` until the user answers."""

    approval_id: str
    tool_call_id: str
    approval_descriptor: Any = None
    input_schema_input: Any = None
    signature: str | None = None  # 6.0.202+


class ToolOutputAvailableChunk(_ToolCallChunk, tag="tool-output-available"):
    """The result (an error if no part has the call). (``preliminary`` comes before the shared
    optional fields here, after them upstream; Helix never sets it.)"""

    tool_call_id: str
    output: Any
    preliminary: bool | None = None


class ToolOutputErrorChunk(_ToolCallChunk, tag="tool-output-error"):
    """The call failed: the part becomes ``output-error``."""

    tool_call_id: str
    error_text: str


class ToolOutputDeniedChunk(_Chunk, tag="tool-output-denied"):
    """The user denied the call: the part becomes ``output-denied``."""

    tool_call_id: str


# -- sources and files -------------------------------------------------------------------------


class SourceUrlChunk(_ContentChunk, tag="source-url"):
    """Appends a ``source-url`` part (a web page the answer cites)."""

    source_id: str
    url: str
    title: str | None = None


class SourceDocumentChunk(_ContentChunk, tag="source-document"):
    """Appends a ``source-document`` part; ``title`` is required here, unlike on a URL."""

    source_id: str
    media_type: str
    title: str
    filename: str | None = None


class FileChunk(_ContentChunk, tag="file"):
    """Appends a ``file`` part; ``url`` may be a ``data:`` URL."""

    url: str
    media_type: str


# -- data --------------------------------------------------------------------------------------


class DataChunk(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True, gc=False):
    """``data-<name>``: upserted as a part by ``(type, id)``; a ``transient`` one reaches only
    ``onData``."""

    type: str
    id: str | None = None
    data: Any
    transient: bool | None = None


# -- message and step boundaries ---------------------------------------------------------------


class StartStepChunk(_Chunk, tag="start-step"):
    """Adds a ``step-start`` part."""


class FinishStepChunk(_Chunk, tag="finish-step"):
    """v6 forgets every open text and reasoning part here: close them first."""


class StartChunk(_Chunk, tag="start"):
    """Names the message being built (a resume's first ``start`` resets it, 6.0.304+)."""

    message_id: str | None = None
    message_metadata: Any = None


class FinishChunk(_Chunk, tag="finish"):
    """Records the finish reason; the chat ends only when the body does."""

    finish_reason: FinishReason | None = None
    message_metadata: Any = None


class AbortChunk(_Chunk, tag="abort"):
    """Accepted and ignored by the chat."""

    reason: str | None = None  # 6.0.15+


class MessageMetadataChunk(_Chunk, tag="message-metadata"):
    """Deep-merged into ``message.metadata``."""

    message_metadata: Any


UIMessageChunk: TypeAlias = (
    TextStartChunk
    | TextDeltaChunk
    | TextEndChunk
    | ReasoningStartChunk
    | ReasoningDeltaChunk
    | ReasoningEndChunk
    | ErrorChunk
    | ToolInputStartChunk
    | ToolInputDeltaChunk
    | ToolInputAvailableChunk
    | ToolInputErrorChunk
    | ToolApprovalRequestChunk
    | ToolOutputAvailableChunk
    | ToolOutputErrorChunk
    | ToolOutputDeniedChunk
    | SourceUrlChunk
    | SourceDocumentChunk
    | FileChunk
    | DataChunk
    | StartStepChunk
    | FinishStepChunk
    | StartChunk
    | FinishChunk
    | AbortChunk
    | MessageMetadataChunk
)
"""Any chunk of the stream."""
