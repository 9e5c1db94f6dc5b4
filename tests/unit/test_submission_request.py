"""One SubmissionRequest: every door builds it, and only its check applies the rules."""

from __future__ import annotations

import ast
import dataclasses
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jobwarden.models.errors import InvalidSubmissionError
from jobwarden.models.intake.submission import SubmissionRequest, check_submission
from jobwarden.tasks.intake import MESSAGE_FIELDS, REQUIRED_FIELDS
from tests.unit.test_submission_rules import LIMITS, VALID

PACKAGE = Path(__file__).resolve().parents[2] / "jobwarden"
# Where a submission comes in: each builds one SubmissionRequest and calls submit_request.
DOORS = {
    "api/intake.py": "http",
    "mcp/server.py": "mcp",
    "cli/main.py": "python",
    "tasks/intake.py": "python and celery",
}
# resubmission (intake/resubmission.py) builds a person's resubmission from the old operation;
# request_for (intake/follow_ups.py) a follow-up's from its parent.
BUILDERS = {"SubmissionRequest", "submission_request", "resubmission", "request_for"}


def test_a_submission_request_is_frozen() -> None:
    request = SubmissionRequest(**VALID)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.tenant = "other"  # type: ignore[misc]


def test_a_submission_request_holds_what_was_sent_and_its_check_normalises_it() -> None:
    at = "2026-12-01T09:00:00+00:00"
    request = SubmissionRequest(**VALID, method="post", business_deadline=at)
    assert (request.method, request.route, request.business_deadline) == ("post", None, at)
    sub = request.check(limits=LIMITS, providers={"sandbox"})
    assert (sub.method, sub.route) == ("POST", "/providers/sandbox/operations")
    assert sub.business_deadline == datetime.fromisoformat(at)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tenant": 7}, "tenant must be a string, got int"),
        ({"provider": "nope"}, "unknown provider 'nope'; known: sandbox"),
        ({"max_status_requests": True}, "max_status_requests must be a whole number"),
        ({"cancel_deadline_seconds": 0}, "cancel_deadline_seconds must be positive"),
    ],
)
def test_the_check_refuses_what_the_keyword_spelling_refused(
    change: dict[str, Any], message: str
) -> None:
    # Doors hand over hostile input as it came: the value never refuses, its check does.
    request = SubmissionRequest(**{**VALID, **change})
    with pytest.raises(InvalidSubmissionError, match=message):
        request.check(limits=LIMITS, providers={"sandbox"})
    with pytest.raises(InvalidSubmissionError, match=message):
        check_submission(limits=LIMITS, providers={"sandbox"}, **{**VALID, **change})


def test_a_celery_message_carries_exactly_the_request_fields() -> None:
    names = {f.name for f in dataclasses.fields(SubmissionRequest)}
    assert names == MESSAGE_FIELDS
    assert set(VALID) == REQUIRED_FIELDS


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name | ast.Attribute)
        and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == name
    ]


def _built(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILDERS
    )


def _is_request(arg: ast.expr, function: ast.AST) -> bool:
    """The argument is a SubmissionRequest built right there or assigned in the function."""
    if _built(arg):
        return True
    if not isinstance(arg, ast.Name):
        return False
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == arg.id for t in node.targets)
        and _built(node.value)
        for node in ast.walk(function)
    )


def test_every_door_submits_one_submission_request() -> None:
    submitting: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        relative = path.relative_to(PACKAGE).as_posix()
        # submit_operation is the public keyword spelling; nothing inside the package uses it.
        assert _calls(tree, "submit_operation") == [], relative
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for call in _calls(function, "submit_request"):
                submitting.add(relative)
                # run_in_threadpool(submit_request, request, ...) passes it as a value.
                assert call.args and _is_request(call.args[0], function), relative
            for call in _calls(function, "run_in_threadpool"):
                first = call.args[0] if call.args else None
                if isinstance(first, ast.Name) and first.id == "submit_request":
                    submitting.add(relative)
                    assert _is_request(call.args[1], function), relative
    assert set(DOORS) <= submitting
