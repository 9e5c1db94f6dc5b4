"""The doors x promises matrix (DESIGN.md invariant 18), printed at the end of a test run.

Each applicable cell of tests/integration/test_door_matrix.py is one test whose id is
``door-promise``; this plugin reads their reports as they arrive. Under pytest-xdist
``pytest_runtest_logreport`` runs in the controller with every worker's reports, so the
grid is printed there, whichever process ran a cell. The table's shape and its n.a.
cells travel as a user property of the meta-test's report, so the controller imports
nothing of the suite (no fixtures, no database) to draw it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

MATRIX_FILE = "test_door_matrix.py::"
# The meta-test's report carries {"doors": [...], "promises": [...], "na": {id: why}}.
TABLE_PROPERTY = "door_matrix_table"
_CELL_ID = re.compile(r"\[([a-z0-9_]+)-([a-z0-9_]+)\]$")
# The worst verdict of a cell's phases wins: a pass whose teardown failed is a FAIL.
_RANK = {"PASS": 0, "SKIP": 1, "FAIL*": 2, "FAIL": 3}


def _verdict(report: pytest.TestReport) -> str | None:
    if hasattr(report, "wasxfail"):
        # A strict xfail is a promise not delivered yet: it did fail, as declared. An
        # unexpected pass of a strict xfail is reported failed by pytest itself.
        return "FAIL*" if report.skipped else "FAIL"
    if report.failed:
        return "FAIL"
    if report.skipped:
        return "SKIP"
    return "PASS" if report.when == "call" else None


class MatrixReport:
    """Collects the matrix's cells from the reports and prints the grid once."""

    def __init__(self) -> None:
        self.verdicts: dict[tuple[str, str], str] = {}
        self.undelivered: dict[tuple[str, str], str] = {}
        self.table: dict[str, Any] | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if MATRIX_FILE not in report.nodeid:
            return
        for name, value in report.user_properties:
            if name == TABLE_PROPERTY and isinstance(value, dict):
                self.table = value
        found = _CELL_ID.search(report.nodeid)
        verdict = _verdict(report)
        if found is None or verdict is None:
            return
        cell = (found.group(1), found.group(2))
        if _RANK[verdict] >= _RANK.get(self.verdicts.get(cell, "PASS"), 0):
            self.verdicts[cell] = verdict
        if verdict == "FAIL*":
            self.undelivered[cell] = str(getattr(report, "wasxfail", ""))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.verdicts and self.table is None:
            return
        doors, promises, na = self._shape()
        terminalreporter.section("doors x promises (DESIGN.md invariant 18)")
        width = max(len(d) for d in doors) + 2
        columns = [max(len(p), 5) + 2 for p in promises]
        named = zip(promises, columns, strict=True)
        header = "".ljust(width) + "".join(p.ljust(w) for p, w in named)
        terminalreporter.write_line(header.rstrip())
        for door in doors:
            cells = []
            for promise, w in zip(promises, columns, strict=True):
                if f"{door}-{promise}" in na:
                    shown = "n.a."
                else:
                    shown = self.verdicts.get((door, promise), "-")
                cells.append(shown.ljust(w))
            terminalreporter.write_line((door.ljust(width) + "".join(cells)).rstrip())
        terminalreporter.write_line(
            "PASS kept; FAIL broken; FAIL* not delivered yet (strict xfail, reason below); "
            "n.a. does not apply (reason in the table); - not run"
        )
        for (door, promise), why in sorted(self.undelivered.items()):
            terminalreporter.write_line(f"FAIL* {door}-{promise}: {why}")

    def _shape(self) -> tuple[list[str], list[str], dict[str, str]]:
        if self.table is not None:
            return list(self.table["doors"]), list(self.table["promises"]), dict(self.table["na"])
        # Only some cells ran (-k): the grid of what ran, in the order first seen.
        doors = list(dict.fromkeys(d for d, _ in self.verdicts))
        promises = list(dict.fromkeys(p for _, p in self.verdicts))
        return doors, promises, {}


def register(config: pytest.Config) -> None:
    """Register the report once per process; only the controller (or a lone process) prints."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(MatrixReport(), "door-matrix-report")
