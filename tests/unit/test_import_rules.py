"""AST lints of the layout's import rules (issue 35), read over jobwarden/ without importing it.

1. Purity: the pure core in models/ does no I/O and never reads the clock. models/
   persistence/ is exempt: it is where Postgres is spoken to. Anything else in models/
   that imports a driver or reads the time breaks determinism of the decision core.
2. Arrows: each room imports only the rooms its ``__init__`` docstring names after
   "May import" (``ALLOWED`` below is that table), so no arrow points back up the layout.
   Lazy imports inside functions, ``TYPE_CHECKING`` imports and ``import_module`` of a
   literal name count alike: each is an arrow all the same.

Each rule is checked against a planted violation, so none can pass by finding nothing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_imports import MODULES, Edge, describe, find_cycles

PACKAGE = Path(__file__).resolve().parents[2] / "jobwarden"
MODELS = PACKAGE / "models"
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


# --- 2. the arrows between rooms ------------------------------------------------------

# What each room may import besides itself, as its __init__ docstring says ("May import").
# ``persistence`` is models/persistence (the SQL), ``models`` the rest of models/ (pure);
# ``jobwarden`` is the package's own __init__ (the public names, loaded on first use).
ALLOWED: dict[str, frozenset[str]] = {
    "models": frozenset(),
    "persistence": frozenset({"models"}),
    "observability": frozenset({"models", "persistence"}),
    "config": frozenset({"models", "persistence", "observability"}),
    "tasks": frozenset({"models", "persistence", "config", "observability"}),
    "api": frozenset({"models", "persistence", "tasks", "config", "observability"}),
    "console": frozenset({"api", "models", "persistence", "tasks", "config", "observability"}),
    "mcp": frozenset({"api", "models", "persistence", "tasks", "config", "observability"}),
    "cli": frozenset(
        {"models", "persistence", "tasks", "config", "observability", "api", "mcp", "demo"}
    ),
    "migrations": frozenset({"models", "persistence", "config"}),
    "demo": frozenset(
        {"models", "persistence", "tasks", "config", "observability", "api", "console", "mcp"}
        | {"cli", "migrations", "jobwarden"}
    ),
    "jobwarden": frozenset({"models", "persistence", "tasks"}),
}
# The rules issue 35 names, each of which the table must keep (a test holds it to them).
NEVER: dict[str, frozenset[str]] = {
    "models": frozenset(
        {"tasks", "api", "console", "cli", "mcp", "observability", "demo", "config"}
        | {"migrations"}
    ),
    "persistence": frozenset(
        {"tasks", "api", "console", "cli", "mcp", "observability", "demo", "config"}
        | {"migrations"}
    ),
    "tasks": frozenset({"api", "console", "cli", "mcp", "demo"}),
    "observability": frozenset({"api", "console", "cli", "mcp", "tasks", "config", "demo"}),
    "api": frozenset({"console", "cli", "mcp", "demo"}),
    "config": frozenset({"api", "console", "cli", "mcp", "tasks", "demo"}),
}


def room_of(module: str) -> str | None:
    """The room a dotted name lies in; None outside jobwarden."""
    parts = module.split(".")
    if parts[0] != "jobwarden":
        return None
    if parts[1:3] == ["models", "persistence"]:
        return "persistence"
    if len(parts) > 1 and parts[1] in ALLOWED:
        return parts[1]
    return "jobwarden"  # the package itself, or a public name it serves


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(module: str, source: str, *, package: bool = False) -> Iterator[tuple[int, str]]:
    """Every (line, dotted name) ``source`` imports, relative imports resolved against
    ``module`` (a package when ``package``); ``from a import b`` yields ``a.b``."""
    base = module.split(".") if package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            anchor = base[: len(base) - node.level + 1] if node.level else []
            stem = ".".join([*anchor, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                yield node.lineno, f"{stem}.{alias.name}" if alias.name != "*" else stem
        elif (
            isinstance(node, ast.Call)
            and _dotted(node.func)[-1:] == ["import_module"]
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def arrows_back(module: str, source: str, *, package: bool = False) -> list[str]:
    """The imports of ``module`` that its room may not make, one message each."""
    room = room_of(module)
    assert room is not None, module
    found = []
    for line, name in imported(module, source, package=package):
        target = room_of(name)
        if target is not None and target != room and target not in ALLOWED[room]:
            found.append(f"{module}:{line}: {room} -> {target} ({name})")
    return found


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_module_lies_in_a_room_with_rules() -> None:
    rooms = {room_of(module_name(path)) for path in _modules()}
    assert rooms == set(ALLOWED)


def test_no_room_imports_a_room_it_may_not() -> None:
    found = [
        problem
        for path in _modules()
        for problem in arrows_back(
            module_name(path),
            path.read_text(encoding="utf-8"),
            package=path.name == "__init__.py",
        )
    ]
    assert found == []


def test_the_table_keeps_every_rule_the_issue_names() -> None:
    for room, never in NEVER.items():
        assert ALLOWED[room] & never == set(), room
    # Nothing but the CLI (its demo and sandbox commands) and the demo itself imports demo.
    assert {room for room, allowed in ALLOWED.items() if "demo" in allowed} == {"cli"}


def test_each_room_names_what_it_may_import_in_its_docstring() -> None:
    for room in set(ALLOWED) - {"persistence", "jobwarden"}:
        doc = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text())) or ""
        assert "May import" in doc, room
        named = ALLOWED[room] - {"persistence", "jobwarden", "cli", "migrations"}
        if room != "demo":  # "anything in jobwarden"
            for other in named:
                assert f"jobwarden.{other}" in doc, (room, other)


@pytest.mark.parametrize(
    ("room", "target"), sorted((room, t) for room, never in NEVER.items() for t in never)
)
def test_the_arrow_lint_catches_each_forbidden_arrow(room: str, target: str) -> None:
    module = (
        "jobwarden.models.persistence.planted"
        if room == "persistence"
        else (f"jobwarden.{room}.planted")
    )
    name = "jobwarden.models.persistence" if target == "persistence" else f"jobwarden.{target}"
    for source in (
        f"import {name}.x",
        f"from {name} import x",
        f"def lazy() -> None:\n    from {name}.x import y",
        f"import importlib\nimportlib.import_module('{name}.x')",
    ):
        assert arrows_back(module, source) != [], (room, target, source)


@pytest.mark.parametrize(
    ("module", "source", "package"),
    [
        # The three arrows issue 35 removed, as they were written.
        ("jobwarden.api.app", "from jobwarden.console import install", False),
        ("jobwarden.observability.logs", "from jobwarden.config.settings import get", False),
        ("jobwarden.models.persistence.migrate", "from jobwarden import migrations", False),
        # Relative imports resolve: ..console from jobwarden.api.app is jobwarden.console.
        ("jobwarden.api.app", "from ..console import install", False),
        ("jobwarden.api", "from ..console import install", True),
        ("jobwarden.tasks.provider.edge", "from ...demo import harness", False),
        ("jobwarden.models.effects", "from .persistence import store", False),
    ],
)
def test_the_arrow_lint_catches_planted_arrows(module: str, source: str, package: bool) -> None:
    assert arrows_back(module, source, package=package) != []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("jobwarden.console.app", "from jobwarden.api.app import create_app"),
        ("jobwarden.console.routes", "from . import session"),
        ("jobwarden.models.persistence.store", "from jobwarden.models.effects import Plan"),
        ("jobwarden.cli.serve", "from jobwarden.api.server import BoundedReadProtocol"),
        ("jobwarden.models.effects", "from jobwarden.models.states import OperationState"),
    ],
)
def test_the_arrow_lint_allows_arrows_down_the_layout(module: str, source: str) -> None:
    assert arrows_back(module, source) == []


# --- 3. "the only module that imports ..." ------------------------------------------------

# A library one module alone may import, as that module's docstring claims; the claim is
# held here, and a docstring making such a claim must be listed (no claim goes unchecked).
OWNED: dict[str, frozenset[str]] = {"obstore": frozenset({"jobwarden.tasks.results.store"})}
_CLAIM = re.compile(r"[Tt]he only module that imports (\w+)")


def foreign_owners(module: str, source: str) -> list[str]:
    """Imports in ``module`` of a library another module alone may import."""
    return [
        f"{module}:{line}: imports {name}"
        for line, name in imported(module, source)
        if name.split(".")[0] in OWNED and module not in OWNED[name.split(".")[0]]
    ]


def test_a_library_one_module_owns_is_imported_by_no_other() -> None:
    found = [
        problem
        for path in _modules()
        for problem in foreign_owners(module_name(path), path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_every_only_module_claim_is_one_the_lint_holds() -> None:
    claims = {
        (match.group(1), module_name(path))
        for path in _modules()
        for match in _CLAIM.finditer(path.read_text(encoding="utf-8"))
    }
    assert claims == {(library, m) for library, owners in OWNED.items() for m in owners}


def test_the_owner_lint_catches_a_planted_import() -> None:
    assert foreign_owners("jobwarden.api.results", "from obstore.store import S3Store") != []
    assert foreign_owners("jobwarden.tasks.results.store", "import obstore") == []


# No circle in the core (from the reservation work): tests/unit/test_imports.py checks the
# whole package for cycles the interpreter would meet and skips ``if TYPE_CHECKING:``
# imports, which never run. This rule is stricter for the core: a module-level import, even
# one only type checkers follow, says what a module is built on, and two modules built on
# each other are one concept split in two (issue 35 found ``actions`` <-> ``operation`` and
# ``effects`` <-> ``reservations``). Imports inside functions are left to test_imports.py.
CORE = "jobwarden.models"
CORE_MODULES = {name: path for name, path in MODULES.items() if name.startswith(CORE)}


def _module_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements a module runs or declares at its top, inside ``if`` (also
    ``if TYPE_CHECKING:``) and ``try`` blocks too, but not inside functions or classes."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            yield from _module_level_imports(node.body)
            yield from _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _module_level_imports(block)
            for handler in node.handlers:
                yield from _module_level_imports(handler.body)


def core_edges(module: str, source: str, known: set[str]) -> list[Edge]:
    """The core modules ``module`` imports at module level: ``from P import X`` means the
    module P.X when there is one, and P otherwise."""
    edges: list[Edge] = []
    for node in _module_level_imports(ast.parse(source).body):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        edges += [Edge(module, t, node.lineno) for t in targets if t in known and t != module]
    return edges


def core_graph() -> list[Edge]:
    known = set(CORE_MODULES)
    return [
        edge
        for name, path in sorted(CORE_MODULES.items())
        for edge in core_edges(name, path.read_text(encoding="utf-8"), known)
    ]


def test_no_import_circle_in_the_core() -> None:
    cycles = find_cycles(core_graph())
    assert cycles == [], "import circles in the pure core:\n  " + "\n  ".join(
        describe(cycle, MODULES) for cycle in cycles
    )


def test_a_circle_through_a_type_checking_import_is_found_and_named() -> None:
    known = {"jobwarden.models.a", "jobwarden.models.b"}
    a = "from jobwarden.models.b import B\n"
    b = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from jobwarden.models.a import A\n"
        "def late():\n"
        "    import jobwarden.models.a\n"
    )
    edges = core_edges("jobwarden.models.a", a, known) + core_edges("jobwarden.models.b", b, known)
    assert [(e.source, e.target, e.line) for e in edges] == [
        ("jobwarden.models.a", "jobwarden.models.b", 1),
        ("jobwarden.models.b", "jobwarden.models.a", 3),  # the late import is not counted
    ]
    (cycle,) = find_cycles(edges)
    assert [e.source for e in cycle] == ["jobwarden.models.a", "jobwarden.models.b"]
