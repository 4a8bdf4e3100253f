"""The agent's state as JSON: copies of it, changes to it published as ``state_patch`` chunks,
and RFC 6902 patches applied to it.

Tools mutate the state in place; what changed is computed afterwards as a diff of JSON copies,
so a client that applies every ``state_patch`` in order holds the same state as the database.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import jsonpatch

from streams.protocol import StatePatch
from workers.exceptions import StatePatchError
from workers.runtime.writer import RunWriter

__all__ = ["diff_state", "json_copy", "patch_state", "publishing_changes"]


def json_copy(state: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``state`` as JSON holds it (a value JSON cannot hold becomes its ``str``)."""
    copied: dict[str, Any] = json.loads(json.dumps(state, default=str))
    return copied


def _resolve(document: Any, pointer: str) -> Any:
    return jsonpatch.JsonPointer(pointer).resolve(document)


def diff_state(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations turning ``before`` into ``after``, limited to add/remove/replace
    (the library's ``move`` and ``copy`` are rewritten, which every client can apply)."""
    operations: list[dict[str, Any]] = []
    for op in jsonpatch.make_patch(before, after).patch:
        kind = op["op"]
        if kind == "move":
            value = _resolve(before, op["from"])
            operations += [{"op": "remove", "path": op["from"]}, {"op": "add", "path": op["path"], "value": value}]
        elif kind == "copy":
            operations.append({"op": "add", "path": op["path"], "value": _resolve(before, op["from"])})
        else:
            operations.append(op)
    return operations


def patch_state(state: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """``state`` with RFC 6902 ``operations`` applied, as a new dict; raises
    :class:`StatePatchError` when they do not apply."""
    try:
        patched: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(state), operations)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as exc:
        raise StatePatchError(f"State patch does not apply: {exc}") from None
    return patched


@asynccontextmanager
async def publishing_changes(writer: RunWriter, state: dict[str, Any]) -> AsyncIterator[None]:
    """Emit one ``state_patch`` for what the block changed in ``state`` (nothing if it changed nothing)."""
    before = json_copy(state)
    yield
    patch = diff_state(before, state)
    if patch:
        await writer.emit(StatePatch, patches=patch)
