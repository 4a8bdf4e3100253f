"""Prints the fault suite's table (``tests.chaos.report``) after a run that made one."""

from __future__ import annotations

from typing import Any

from tests.chaos import report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if report.ROWS:
        terminalreporter.section("faults against the production topology")
        terminalreporter.write_line(report.table())
