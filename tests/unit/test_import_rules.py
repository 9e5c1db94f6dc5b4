"""Import rules of the pure core: no two modules of jobwarden.models need each other.

tests/unit/test_imports.py checks the whole package for cycles the interpreter would
meet; it skips ``if TYPE_CHECKING:`` imports, which never run. This rule is stricter
for the core: a module-level import, even one only type checkers follow, says what a
module is built on, and two modules built on each other are one concept split in two
(issue 35 found ``actions`` <-> ``operation`` and ``effects`` <-> ``reservations``).
Imports inside functions are left to test_imports.py.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.unit.test_imports import MODULES, Edge, describe, find_cycles

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
