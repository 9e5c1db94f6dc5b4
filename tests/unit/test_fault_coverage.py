"""Every named fault point is armed by an acceptance test, and both lethal actions are used.

A static scan, no servers: it reads tests/acceptance/test_*.py for calls to the `arm`
fixture, `arm(point, key, action)`, and for calls to helpers in those files that pass a
parameter of their own on to `arm` as the point (and perhaps as the action). An `arm` call
whose point the scan cannot read fails too, so the scan never silently misses one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from jobwarden.tasks import faults

TESTS = Path(__file__).resolve().parents[1]
ACCEPTANCE = sorted((TESTS / "acceptance").glob("test_*.py"))
# The shell and the core that name the points (the step table is pure data in models/).
SOURCES = [
    p
    for folder in ("tasks", "models")
    for p in sorted((Path(faults.__file__).resolve().parents[1] / folder).glob("*.py"))
    if p.name != "faults.py"
]
ACTIONS = ("kill", "raise", "block:")


@dataclass(frozen=True, slots=True)
class Arming:
    where: str
    point: str | None  # None: not a literal the scan can read
    action: str | None  # "kill", "raise", "block:…", or None when unreadable


@dataclass(frozen=True, slots=True)
class Helper:
    params: tuple[str, ...]
    point: str  # the parameter passed to arm() as the point
    action: ast.expr | None  # what it passes as the action


def _literal(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]  # f"block:{n}" reads as "block:"
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value
    return None


def _argument(call: ast.Call, index: int, name: str) -> ast.expr | None:
    if index < len(call.args):
        return call.args[index]
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def _arm_calls(node: ast.AST) -> Iterator[ast.Call]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "arm":
            yield sub


def _helpers(tree: ast.Module) -> tuple[dict[str, Helper], set[int]]:
    """Helpers by name, and the arm() calls inside them (counted at their call sites)."""
    found: dict[str, Helper] = {}
    forwarded: set[int] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        params = tuple(a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs])
        for call in _arm_calls(fn):
            point = _argument(call, 0, "point")
            if isinstance(point, ast.Name) and point.id in params:
                found[fn.name] = Helper(params, point.id, _argument(call, 2, "action"))
                forwarded.add(id(call))
    return found, forwarded


def _armings(path: Path) -> Iterator[Arming]:
    tree = ast.parse(path.read_text(), filename=str(path))
    helpers, forwarded = _helpers(tree)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
        assert isinstance(call.func, ast.Name)
        where = f"{path.name}:{call.lineno}"
        name = call.func.id
        if name == "arm" and id(call) not in forwarded:
            point = _argument(call, 0, "point")
            yield Arming(where, _literal(point), _literal(_argument(call, 2, "action")))
        elif name in helpers:
            helper = helpers[name]
            point = _argument(call, helper.params.index(helper.point), helper.point)
            action = helper.action
            if isinstance(action, ast.Name) and action.id in helper.params:
                action = _argument(call, helper.params.index(action.id), action.id)
            yield Arming(where, _literal(point), _literal(action))


ARMINGS = [a for path in ACCEPTANCE for a in _armings(path)]


def test_every_named_fault_point_is_armed_by_an_acceptance_test() -> None:
    armed = {a.point for a in ARMINGS}
    unarmed = sorted(faults.POINTS - armed)
    assert not unarmed, f"fault points no acceptance test arms: {', '.join(unarmed)}"


def test_acceptance_tests_arm_only_fault_points_that_exist() -> None:
    # An unknown name is never read by any worker: such a test would pass without its fault.
    unknown = [f"{a.where} {a.point}" for a in ARMINGS if a.point not in faults.POINTS]
    assert not unknown, f"armed points the shell does not know (or the scan cannot read): {unknown}"


def test_acceptance_tests_arm_with_known_actions_and_use_both_kill_and_raise() -> None:
    odd = [f"{a.where} {a.action}" for a in ARMINGS if not (a.action or "").startswith(ACTIONS)]
    assert not odd, f"actions that are not kill, raise or block:<seconds>: {odd}"
    used = {a.action for a in ARMINGS}
    missing = [action for action in ("kill", "raise") if action not in used]
    assert not missing, f"no acceptance test arms a point with: {', '.join(missing)}"


def test_every_named_fault_point_is_named_where_the_shell_passes_it() -> None:
    # A point listed in POINTS but passed by no code would be armed by a test and never fire.
    text = "\n".join(p.read_text() for p in SOURCES)
    dead = sorted(p for p in faults.POINTS if f'"{p}"' not in text)
    assert not dead, f"fault points no module in tasks/ or models/ names: {', '.join(dead)}"


def test_the_scan_reads_an_arming_through_a_helper_and_flags_an_unreadable_one(
    tmp_path: Path,
) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "def _at(point, arm, action):\n"
        "    arm(point, 'k', action)\n"
        "def test_a(arm):\n"
        "    _at('after_lease', arm, 'kill')\n"
        "    arm('before_schedule', 'k', f'block:{3}')\n"
        "    name = 'after_poll_claim'\n"
        "    arm(name, 'k', 'raise')\n"
    )
    assert [(a.point, a.action) for a in _armings(sample)] == [
        ("after_lease", "kill"),
        ("before_schedule", "block:"),
        (None, "raise"),
    ]
