"""Every module imports on its own under the one import root, and the static import
graph inside jobwarden has no cycle.

Each module is imported first thing in a fresh interpreter, because an import that
only works when something else was imported before it is a bug that a shared test
process hides. The graph counts imports inside functions too: a late import hides
a cycle from the interpreter only until the day someone moves it to the top.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
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

# One interpreter per batch imports every third-party library jobwarden uses (never
# jobwarden itself), then forks a child per module: the child imports that one module
# first thing, so an import that works only after another jobwarden module was imported
# still fails, while FastAPI, Celery and the MCP SDK are imported once per batch rather
# than 111 times (that took about 40 s idle, and past 120 s on a loaded 2-core machine).
ZYGOTE = """
import importlib, json, os, sys, traceback
preload, folders, names = json.loads(sys.argv[1])
for module in preload:
    try:
        importlib.import_module(module)
    except Exception:
        pass  # optional or platform-bound: the child imports what it needs anyway
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


def third_party_imports() -> list[str]:
    """Top-level names jobwarden imports that are neither its own nor the standard library."""
    own = {"jobwarden", *FOLDER_NAMES}
    found: set[str] = set()
    for path in MODULES.values():
        for node in _import_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                heads = [node.module] if node.module and node.level == 0 else []
            else:
                heads = [alias.name for alias in node.names]
            found |= {h.split(".")[0] for h in heads}
    return sorted(found - own - set(sys.stdlib_module_names))


def import_each_alone(names: list[str]) -> list[str]:
    """Import each module in its own freshly forked interpreter; problem descriptions."""
    # From the repository root, where a stray `import tasks` would succeed rather than fail.
    job = json.dumps([THIRD_PARTY, list(FOLDER_NAMES), names])
    done = subprocess.run(
        [sys.executable, "-c", ZYGOTE, job],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=REPO,
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
    preload = THIRD_PARTY
    assert {"celery", "fastapi", "sqlalchemy"} <= set(preload)
    assert not {"jobwarden", *FOLDER_NAMES} & set(preload)


def test_a_module_that_cannot_be_imported_is_caught_and_the_next_child_is_clean() -> None:
    # The check itself: the forked child must not see what an earlier child imported.
    problems = import_each_alone(["jobwarden.models.states", "jobwarden.no_such_module"])
    assert len(problems) == 1 and problems[0].startswith("jobwarden.no_such_module:")


# About 45 s of CPU in all (the libraries once per batch, then each module's own imports
# of jobwarden); the bound holds with two busy processes beside the suite on 2 cores.
@pytest.mark.timeout(300)
def test_every_module_imports_alone_in_a_fresh_interpreter_under_the_one_root() -> None:
    # Two batches, one per core of the machines the suite runs on.
    batches = [IMPORTABLE[0::2], IMPORTABLE[1::2]]
    with ThreadPoolExecutor(max_workers=len(batches)) as pool:
        problems = [p for found in pool.map(import_each_alone, batches) for p in found]
    assert problems == [], "\n\n".join(problems)


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
