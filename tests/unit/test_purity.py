"""An AST lint: the pure core in models/ does no I/O and never reads the clock.

models/persistence/ is exempt: it is where Postgres is spoken to. Anything else in
models/ that imports a driver or reads the time breaks determinism of the decision core.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[2] / "jobwarden" / "models"
# The folder rule: every module under models/ is pure but those in models/persistence/,
# which alone may speak to Postgres. No list of file names to keep up to date.
PERSISTENCE = MODELS / "persistence"
# ... and a pure module importing one of those is no longer pure.
PERSISTENCE_PACKAGE = "jobwarden.models.persistence"
FORBIDDEN_IMPORTS = {"sqlalchemy", "httpx", "redis", "celery", "psycopg", "psycopg2", "obstore"}
# Attribute chains that read the clock, matched on their last two names.
CLOCK_CALLS = {
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
    ("time", "time"),
    ("time", "time_ns"),
    ("time", "monotonic"),
    ("time", "monotonic_ns"),
    ("time", "perf_counter"),
}
CLOCK_NAMES = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "utcnow"}

PURE_MODULES = sorted(p for p in MODELS.rglob("*.py") if PERSISTENCE not in p.parents)


def _dotted(node: ast.expr) -> list[str]:
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return names[::-1]


def violations(source: str) -> list[str]:
    """Forbidden imports and clock reads in ``source``, one message each."""
    found: list[str] = []
    clock_imports: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PERSISTENCE_PACKAGE):
                    found.append(f"line {node.lineno}: import {alias.name} (persistence)")
                if alias.name.split(".")[0] in FORBIDDEN_IMPORTS:
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.startswith(PERSISTENCE_PACKAGE) or (
                node.module == "jobwarden.models"
                and any(a.name == "persistence" for a in node.names)
            ):
                found.append(f"line {node.lineno}: from {node.module} import ... (persistence)")
            if node.module.split(".")[0] in FORBIDDEN_IMPORTS:
                found.append(f"line {node.lineno}: from {node.module} import ...")
            if node.module == "time":
                clock_imports |= {a.asname or a.name for a in node.names if a.name in CLOCK_NAMES}
        elif isinstance(node, ast.Call):
            dotted = _dotted(node.func)
            if tuple(dotted[-2:]) in CLOCK_CALLS:
                found.append(f"line {node.lineno}: {'.'.join(dotted)}()")
            elif len(dotted) == 1 and dotted[0] in clock_imports:
                found.append(f"line {node.lineno}: {dotted[0]}() from time")
    return found


def test_the_pure_core_modules_exist() -> None:
    names = {p.name for p in PURE_MODULES}
    assert {"backoff.py", "signals.py", "decisions.py", "pointers.py", "states.py"} <= names


@pytest.mark.parametrize("module", PURE_MODULES, ids=lambda p: p.name)
def test_pure_modules_import_no_drivers_and_never_read_the_clock(module: Path) -> None:
    assert violations(module.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "source",
    [
        "import sqlalchemy",
        "import httpx as h",
        "from redis.lock import Lock",
        "from celery import shared_task",
        "import psycopg.errors",
        "from datetime import datetime\nx = datetime.now()",
        "import datetime\nx = datetime.datetime.now(datetime.UTC)",
        "from datetime import datetime\nx = datetime.utcnow()",
        "import time\nx = time.time()",
        "import time\nx = time.monotonic()",
        "from time import time\nx = time()",
        "from time import perf_counter as pc\nx = pc()",
        "from jobwarden.models.persistence import store",
        "from jobwarden.models.persistence.db import transaction",
        "from jobwarden.models import persistence",
        "import jobwarden.models.persistence.tables",
    ],
)
def test_the_lint_catches_each_forbidden_pattern(source: str) -> None:
    assert violations(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "from datetime import datetime, timedelta\nx = datetime.fromisoformat('2024-01-01')",
        "import math\nx = math.ldexp(1.0, 3)",
        "from models.contracts.contract import ProviderContract",
    ],
)
def test_the_lint_allows_pure_code(source: str) -> None:
    assert violations(source) == []
