"""What the benchmarks' processes cost, read from ``/proc`` as ops would: memory, CPU time and how
busy the CPUs were. The processes themselves are started by :mod:`tooling.servers`."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time process ``pid`` has used (``/proc/<pid>/stat``), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15 of stat)


def cpus_idle(cpus: set[int] | None = None) -> tuple[float, float]:
    """Seconds elapsed and seconds idle so far, summed over ``cpus`` (all when ``None``), from
    ``/proc/stat``: two readings give the share of those CPUs that was busy between them."""
    elapsed = idle = 0.0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu" or (cpus is not None and int(name[3:]) not in cpus):
            continue
        ticks = [int(value) for value in values[:8]]
        elapsed += sum(ticks) / _TICKS
        idle += (ticks[3] + ticks[4]) / _TICKS  # idle, iowait
    return elapsed, idle


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")
