"""The Django state store: both faces of the database in one object, as services wire it in.

The bridge reads through :class:`~chat.state.reads.DjangoStateReader`; executors and the runtime
write through :class:`~chat.state.recorder.DjangoRunRecorder`.
"""

from __future__ import annotations

from chat.state.reads import DjangoStateReader
from chat.state.recorder import DjangoRunRecorder

__all__ = ["DjangoStateStore"]


class DjangoStateStore(DjangoStateReader, DjangoRunRecorder):
    """Sessions, runs, messages and checkpoints in the database."""
