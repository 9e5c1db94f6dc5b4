"""Every module imports on its own under the one import root, and the static import
graph inside jobwarden has no cycle.

Each module is imported first thing in a fresh interpreter, because an import that
only works when something else was imported before it is a bug that a shared test
process hides. The graph counts imports inside functions too: a late import hides
a cycle from the interpreter only until the day someone moves it to the top.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import jobwarden

PACKAGE = Path(jobwarden.__file__).parent
REPO = PACKAGE.parent
# The repository folders that install under jobwarden.; a user's own modules may carry these names.
FOLDER_NAMES = ("models", "tasks", "config", "migrations")


def discover(package: Path = PACKAGE) -> dict[str, Path]:
    """Module name -> file for every .py under the package, following the folder symlinks."""
    found: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(package, followlinks=True):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if (here / d / "__init__.py").is_file())
        parts = (package.name, *here.relative_to(package).parts)
        for filename in sorted(filenames):
            if filename.endswith(".py"):
                stem = filename[:-3]
                name = ".".join(parts if stem == "__init__" else (*parts, stem))
                found[name] = here / filename
    return found


MODULES = discover()


def needs_alembic_context(name: str) -> bool:
    # env.py and the version scripts run only inside `alembic upgrade`, which provides `op`.
    return name == "jobwarden.migrations.env" or name.startswith("jobwarden.migrations.versions.")


IMPORTABLE = sorted(name for name in MODULES if not needs_alembic_context(name))

# One interpreter per batch runs every import statement of jobwarden's that names a
# third-party library (never jobwarden itself), then forks a child per module: the child
# imports that one module first thing, so an import that works only after another jobwarden
# module was imported still fails, while FastAPI, Celery and the MCP SDK are imported once
# per batch rather than 111 times (that took about 40 s idle, and past 120 s on a loaded
# 2-core machine). The statements are run as written, `from sqlalchemy.orm import Session`
# included: importing `sqlalchemy` alone left sqlalchemy.orm, celery's lazily loaded app and
# kombu to every child (half of the modules the children imported, ~11,500 in all). What a
# module would have imported anyway proves nothing when it is imported once more.
ZYGOTE = """
import gc, importlib, json, os, sys, traceback
preload, folders, names = json.loads(sys.argv[1])
for module, attributes in preload:
    try:
        imported = importlib.import_module(module)
        for attribute in attributes:  # as `from module import attribute` does
            if not hasattr(imported, attribute):
                importlib.import_module(f"{module}.{attribute}")
    except Exception:
        pass  # optional or platform-bound: the child imports what it needs anyway
# The preloaded objects leave the collector's view: a collection in a child would otherwise
# walk (and so copy, page by page) the whole inherited heap (gc.freeze's documented use).
gc.freeze()
results = {}
for name in names:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            found = sorted(m for m in sys.modules if m.split(".")[0] in folders)
            out = {"strays": found}
        except BaseException:
            out = {"error": traceback.format_exc()[-2000:]}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    _, status = os.waitpid(pid, 0)
    results[name] = json.loads(data) if data else {"error": f"the child died ({status})"}
print(json.dumps(results))
"""


def third_party_imports() -> list[tuple[str, list[str]]]:
    """Every module jobwarden imports that is neither its own nor the standard library's,
    with the names its `from … import` statements take from it (sorted, merged)."""
    own = {"jobwarden", *FOLDER_NAMES}
    found: dict[str, set[str]] = {}
    for path in MODULES.values():
        for node in _import_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.module and node.level == 0:
                    found.setdefault(node.module, set()).update(a.name for a in node.names)
            else:
                for alias in node.names:
                    found.setdefault(alias.name, set())
    return sorted(
        (module, sorted(names))
        for module, names in found.items()
        if module.split(".")[0] not in own | set(sys.stdlib_module_names)
    )


def import_each_alone(names: list[str]) -> list[str]:
    """Import each module in its own freshly forked interpreter; problem descriptions."""
    # From the repository root, where a stray `import tasks` would succeed rather than fail.
    job = json.dumps([THIRD_PARTY, list(FOLDER_NAMES), names])
    # Bytecode is written (PYTHONDONTWRITEBYTECODE dropped, where the machine sets it): the
    # venv is installed with --no-compile, so without it every child compiled each jobwarden
    # module it imports from source again. A cached .pyc changes nothing a child proves.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, "-c", ZYGOTE, job],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=REPO,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        return [f"{names}: exit {done.returncode}\n{done.stderr[-2000:]}"]
    problems = []
    for name, result in json.loads(done.stdout.splitlines()[-1]).items():
        if "error" in result:
            problems.append(f"{name}: {result['error']}")
        elif result["strays"]:
            problems.append(f"{name}: imported top-level {result['strays']}, not jobwarden.")
    return problems


def test_discovery_walks_every_folder_of_the_package() -> None:
    for name in (
        "jobwarden",
        "jobwarden.cli.main",
        "jobwarden.demo.sandbox.server",
        "jobwarden.models.states",
        "jobwarden.tasks.pipeline",
        "jobwarden.config.celery_app",
        "jobwarden.migrations",
        "jobwarden.migrations.env",
        "jobwarden.migrations.versions.0001_operations_and_events",
    ):
        assert name in MODULES, name
    assert "jobwarden.migrations.env" not in IMPORTABLE
    assert "jobwarden.migrations.versions" in IMPORTABLE
    assert not any(".versions.0" in name for name in IMPORTABLE)


def test_the_preloaded_libraries_are_third_party_only() -> None:
    preload = dict(THIRD_PARTY)
    assert {"celery", "fastapi", "sqlalchemy", "sqlalchemy.orm"} <= set(preload)
    assert "Celery" in preload["celery"]
    heads = {module.split(".")[0] for module in preload}
    assert not {"jobwarden", *FOLDER_NAMES} & heads
    assert not heads & set(sys.stdlib_module_names)


def test_a_module_that_cannot_be_imported_is_caught_and_the_next_child_is_clean() -> None:
    # The check itself: the forked child must not see what an earlier child imported.
    problems = import_each_alone(["jobwarden.models.states", "jobwarden.no_such_module"])
    assert len(problems) == 1 and problems[0].startswith("jobwarden.no_such_module:")


# About 40 s of CPU in all on a loaded machine (the libraries once, ~4 s, then each module's
# own imports of jobwarden); the bound holds with two busy processes beside the suite on 2 cores.
@pytest.mark.timeout(300)
def test_every_module_imports_alone_in_a_fresh_interpreter_under_the_one_root() -> None:
    # One batch: a second one on the other core halved the wall time but preloaded the
    # libraries twice (~4 s of CPU more), and the suite's wall time is its CPU over 2 cores.
    problems = import_each_alone(IMPORTABLE)
    assert problems == [], "\n\n".join(problems)


def unimported_submodules(source: str, is_module: Callable[[str], bool]) -> list[str]:
    """`X.sub` used after a bare `import X` (or `import X as x`) where X.sub is a module the
    source never imports: it works only when something else imported X.sub first."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported.add(alias.name)
                if "." not in alias.name or alias.asname:
                    bound[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module)
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = bound.get(node.value.id)
            submodule = f"{module}.{node.attr}"
            if module and submodule not in imported and is_module(submodule):
                found.append(f"{submodule} (line {node.lineno})")
    return sorted(set(found))


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def loaded_by_their_packages(submodules: Iterable[str]) -> set[str]:
    """Those of ``submodules`` that importing their top-level package alone loads, in a
    fresh interpreter (structlog's __init__ imports structlog.stdlib, say)."""
    wanted = sorted(set(submodules))
    code = (
        "import importlib, json, sys\n"
        "wanted = json.loads(sys.argv[1])\n"
        "for name in wanted:\n"
        "    importlib.import_module(name.split('.')[0])\n"
        "print(json.dumps([name for name in wanted if name in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(wanted)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=True,
    )
    return set(json.loads(done.stdout))


def test_a_used_third_party_submodule_is_imported_where_it_is_used() -> None:
    # The preload above imports sqlalchemy.orm once for every child, so the children no
    # longer catch `import sqlalchemy as sa` followed by `sa.orm.Session` at import time;
    # this does, and inside functions too. (The standard library is never preloaded.)
    def outside_the_standard_library(name: str) -> bool:
        return name.partition(".")[0] not in sys.stdlib_module_names and _is_module(name)

    used = {
        name: unimported_submodules(path.read_text(encoding="utf-8"), outside_the_standard_library)
        for name, path in MODULES.items()
    }
    loaded = loaded_by_their_packages(f.split()[0] for found in used.values() for f in found)
    problems = {
        name: kept
        for name, found in used.items()
        if (kept := [f for f in found if f.split()[0] not in loaded])
    }
    assert problems == {}


def test_a_used_submodule_left_unimported_is_caught() -> None:
    planted = "import sqlalchemy as sa\nimport json\nSession = sa.orm.Session\nsa.func.now\n"
    found = unimported_submodules(planted, _is_module)
    assert found == ["sqlalchemy.orm (line 3)"]
    assert loaded_by_their_packages(["sqlalchemy.orm", "structlog.stdlib"]) == {"structlog.stdlib"}
    fixed = "import sqlalchemy as sa\nimport sqlalchemy.orm\nSession = sa.orm.Session\n"
    assert unimported_submodules(fixed, _is_module) == []


# ---- the static import graph -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    line: int


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those that only type checkers run."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        children: Iterable[ast.AST] = node.orelse
    else:
        children = ast.iter_child_nodes(node)
    for child in children:
        yield from _import_nodes(child)


def _known_prefix(name: str, known: set[str]) -> str | None:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def edges_of(module: str, source: str, known: set[str], *, is_package: bool = False) -> list[Edge]:
    """The modules of ``known`` that ``module`` imports, where `from P import X` means P.X
    when that is a module and P (its ``__init__``) otherwise, e.g. a lazily re-exported name."""
    edges: list[Edge] = []
    for node in _import_nodes(ast.parse(source)):
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [_known_prefix(alias.name, known) for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.append(submodule if submodule in known else _known_prefix(base, known))
        edges.extend(Edge(module, t, node.lineno) for t in targets if t is not None and t != module)
    return edges


def import_graph(modules: dict[str, Path]) -> list[Edge]:
    known = set(modules)
    edges: list[Edge] = []
    for name, path in sorted(modules.items()):
        source = path.read_text(encoding="utf-8")
        edges += edges_of(name, source, known, is_package=path.name == "__init__.py")
    return edges


def find_cycles(edges: Iterable[Edge]) -> list[list[Edge]]:
    """One cycle per strongly connected component that has one (Tarjan), as its edges."""
    graph: dict[str, list[Edge]] = {}
    for edge in edges:
        graph.setdefault(edge.source, []).append(edge)
        graph.setdefault(edge.target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for edge in graph[node]:
            if edge.target not in index:
                visit(edge.target)
                low[node] = min(low[node], low[edge.target])
            elif edge.target in on_stack:
                low[node] = min(low[node], index[edge.target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_within(graph, component) for component in components]


def _cycle_within(graph: dict[str, list[Edge]], component: set[str]) -> list[Edge]:
    # Shortest way from the component's first module back to itself, staying inside it.
    start = min(component)
    paths: dict[str, list[Edge]] = {start: []}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for edge in graph[node]:
                if edge.target == start:
                    return [*paths[node], edge]
                if edge.target in component and edge.target not in paths:
                    paths[edge.target] = [*paths[node], edge]
                    following.append(edge.target)
        frontier = following
    raise AssertionError(f"component without a cycle: {sorted(component)}")


def describe(cycle: list[Edge], modules: dict[str, Path]) -> str:
    steps = [cycle[0].source]
    for edge in cycle:
        where = modules[edge.source].relative_to(PACKAGE) if edge.source in modules else "?"
        steps.append(f"-> {edge.target}  ({where}:{edge.line})")
    return "\n    ".join(steps)


def test_the_graph_reads_each_kind_of_import_statement() -> None:
    known = {
        "jobwarden",
        "jobwarden.models",
        "jobwarden.models.store",
        "jobwarden.models.db",
        "jobwarden.tasks",
        "jobwarden.tasks.intake",
    }
    source = """
from typing import TYPE_CHECKING
import os
import jobwarden.models.store
from jobwarden import submit
from jobwarden import models
from jobwarden.models import store as s, not_a_module
from . import store
from .db import transaction

if TYPE_CHECKING:
    from jobwarden.tasks import intake

def late():
    import importlib
    importlib.import_module("jobwarden.tasks.intake")
    from jobwarden.tasks.intake import submit_operation
"""
    edges = edges_of("jobwarden.models.thing", source, known)
    assert [(e.target, e.line) for e in edges] == [
        ("jobwarden.models.store", 4),
        ("jobwarden", 5),
        ("jobwarden.models", 6),
        ("jobwarden.models.store", 7),
        ("jobwarden.models", 7),
        ("jobwarden.models.store", 8),
        ("jobwarden.models.db", 9),
        ("jobwarden.tasks.intake", 17),
    ]
    from_package = edges_of("jobwarden.models", "from . import db", known, is_package=True)
    assert [e.target for e in from_package] == ["jobwarden.models.db"]


def test_the_cycle_finder_reports_a_planted_cycle_and_passes_a_tree() -> None:
    tree = [Edge("a", "b", 1), Edge("a", "c", 2), Edge("b", "c", 3)]
    assert find_cycles(tree) == []
    planted = [*tree, Edge("c", "d", 4), Edge("d", "b", 5)]
    cycles = find_cycles(planted)
    assert [[(e.source, e.target) for e in c] for c in cycles] == [
        [("b", "c"), ("c", "d"), ("d", "b")]
    ]


def test_the_package_init_imports_no_submodule_so_no_cycle_can_run_through_it() -> None:
    init = [e for e in import_graph(MODULES) if e.source == "jobwarden"]
    assert init == []


def test_modules_inside_jobwarden_import_each_other_without_a_cycle() -> None:
    cycles = find_cycles(import_graph(MODULES))
    report = "\n\n".join("import cycle:\n    " + describe(c, MODULES) for c in cycles)
    assert cycles == [], report


# Read once, as the module is collected: CPython 3.11's ast can raise "SystemError: AST
# constructor recursion depth mismatch" when it parses after other tests in the same
# process have recursed deeply (the deep-JSON and hypothesis tables); before any test has
# run, its recursion counter is still in step.
THIRD_PARTY = third_party_imports()
