"""The fault suite's table: what each fault test saw, printed at the end of the run (by
``tests/chaos/conftest.py``) in the form docs/reliability.md quotes."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

from tests.chaos.topology import ChatResult


@dataclass
class FaultRow:
    fault: str
    clients: int
    answered: int  # clients that got the whole answer (``finish``)
    errors: str  # the typed errors the others got, by code
    last_end: float | None  # seconds after the fault cleared when the last client ended (<0: before)
    runs: str  # the runs' final states, by status and attempts
    memory: str = ""  # the web processes' growth over 3,000 requests after the fault


ROWS: list[FaultRow] = []


def record(
    fault: str,
    results: list[tuple[str, ChatResult]],
    cleared_at: float,
    runs: list[tuple[str, int]],
    memory: str = "",
    run_codes: dict[str, str] | None = None,
) -> None:
    """``run_codes``: the code each failed run recorded, by session; its client's ``error`` event
    carries the run's words for the user, not the code."""
    run_codes = run_codes or {}
    codes = Counter(
        error.split(":", 1)[0][:40] if ":" in error or session_id not in run_codes else f"run {run_codes[session_id]}"
        for session_id, result in results
        for error in result.errors[:1]
    )
    codes.update(f"HTTP {r.status} {json.loads(r.body)['code']}" for _, r in results if r.status not in (0, 200))
    states = Counter(f"{status}" + (f" (attempt {attempt})" if attempt > 1 else "") for status, attempt in runs)
    ROWS.append(
        FaultRow(
            fault=fault,
            clients=len(results),
            answered=sum(result.finished and not result.errors for _, result in results),
            errors=", ".join(f"{n} {code}" for code, n in sorted(codes.items())) or "none",
            last_end=max(result.ended_at for _, result in results) - cleared_at,
            runs=", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "deleted with their sessions",
            memory=memory,
        )
    )


def table() -> str:
    lines = [
        "| fault | clients | answered | typed errors | last client ended | runs | web memory over 3,000 requests |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.fault} | {r.clients} | {r.answered} | {r.errors} | {'n/a' if r.last_end is None else f'{r.last_end:+.1f} s'} "
        f"| {r.runs} | {r.memory or 'not measured'} |"
        for r in ROWS
    ]
    return "\n".join(lines)
