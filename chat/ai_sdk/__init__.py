"""The AI SDK bridge: stored Helix chunks and messages → what an AI SDK v6 ``useChat`` receives.

Pure code: no Django request, no network I/O beyond the store interfaces it is handed.

Wire types (mirroring ``ai@6.0.322``): :mod:`~chat.ai_sdk.events` (stream chunks) and
:mod:`~chat.ai_sdk.ui_messages` (messages and parts). Live stream: :mod:`~chat.ai_sdk.transformer`
(with :mod:`~chat.ai_sdk.data_events`) and :mod:`~chat.ai_sdk.sse`. Resuming:
:mod:`~chat.ai_sdk.partial`, :mod:`~chat.ai_sdk.replay`, :mod:`~chat.ai_sdk.resume`. Messages
and snapshots: :mod:`~chat.ai_sdk.messages`, :mod:`~chat.ai_sdk.loading`,
:mod:`~chat.ai_sdk.snapshot`, over :mod:`~chat.ai_sdk.state`.
"""
