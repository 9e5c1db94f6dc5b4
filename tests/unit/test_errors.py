"""The exception tree's one base: a message by default, facts as dataclass fields.

Every error jobwarden raises on purpose derives from ``JobwardenError``; its message is
the one given, else its docstring's first paragraph (procrastinate's ``exceptions.py``);
an error carrying facts declares them as dataclass fields and spells its message with a
``template``, so none writes an ``__init__``/``__str__`` pair of its own.
"""

from __future__ import annotations

import ast
import pickle
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest

from jobwarden.models import errors
from jobwarden.models.contracts.command_schema import SchemaDocumentError
from jobwarden.models.errors import (
    ApprovalRefusedError,
    JobwardenError,
    LeaseNotAcquiredError,
    PartitionNotArchivedError,
    RetryLaterError,
    StaleVersionError,
    TransitionRefusedError,
)
from jobwarden.models.schedules.slots import ScheduleError
from jobwarden.tasks.outcomes import AutomationStoppedError

PACKAGE = Path(__file__).resolve().parents[2] / "jobwarden"

# Every error that carries facts: each is rebuilt from its pickle with the same facts.
FACT_ERRORS = sorted(
    (
        *(
            cls
            for cls in vars(errors).values()
            if isinstance(cls, type) and issubclass(cls, JobwardenError) and is_dataclass(cls)
        ),
        SchemaDocumentError,
        ScheduleError,
        AutomationStoppedError,
    ),
    key=lambda cls: cls.__name__,
)


def test_an_error_raised_without_a_message_says_its_docstring() -> None:
    assert str(LeaseNotAcquiredError()) == "Another worker holds the operation's lease."
    # The first paragraph, on one line, however the docstring wraps it.
    assert str(PartitionNotArchivedError()) == (
        "A history partition gained an event its archived segment lacks; it stays attached "
        "(the next archiving run archives that history again)."
    )
    assert str(LeaseNotAcquiredError("held by worker-2")) == "held by worker-2"


def test_an_error_with_facts_spells_its_message_over_them() -> None:
    assert str(ApprovalRefusedError("approval_window_closed", "it closed at 10:00")) == (
        "approval_window_closed: it closed at 10:00"
    )
    refused = TransitionRefusedError(src="observing", dst="queued", reason="not in the table")
    assert str(refused) == "transition observing -> queued refused: not in the table"
    assert refused.args == ("observing", "queued", "not in the table")
    assert str(StaleVersionError("op-1", 3)) == (
        "operation op-1: version 3 is stale; another owner wrote first"
    )
    assert str(SchemaDocumentError("", "must be a JSON object")) == "must be a JSON object"
    assert str(SchemaDocumentError("properties.a", "bad")) == "properties.a: bad"


@pytest.mark.parametrize("cls", FACT_ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_with_facts_pickles_whole_even_when_built_by_keyword(cls: type[Any]) -> None:
    # Annotations are strings here (from __future__ import annotations): "int" or the rest.
    facts = {f.name: 7 if f.type == "int" else f"{f.name}-value" for f in fields(cls)}
    error = cls(**facts)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert {name: getattr(back, name) for name in facts} == facts
    assert str(back) == str(error) and back.args == error.args


def test_a_retry_later_error_keeps_its_message_and_retry_after() -> None:
    back = pickle.loads(pickle.dumps(RetryLaterError("provider busy", retry_after=3.0)))
    assert (back.args[0], back.retry_after) == ("provider busy", 3.0)


def _pairs(source: str) -> list[str]:
    """Classes in ``source`` that write both ``__init__`` and ``__str__``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            methods = {m.name for m in node.body if isinstance(m, ast.FunctionDef)}
            if {"__init__", "__str__"} <= methods:
                found.append(node.name)
    return found


def test_no_error_class_writes_its_own_init_and_str_pair() -> None:
    found = {
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in PACKAGE.rglob("*.py")
        for name in _pairs(path.read_text(encoding="utf-8"))
        if name.endswith("Error") and name != "JobwardenError"
    }
    assert found == set()


def test_the_pair_lint_finds_a_planted_pair() -> None:
    planted = (
        "class PlantedError(Exception):\n"
        "    def __init__(self, a: str) -> None:\n"
        "        self.a = a\n"
        "    def __str__(self) -> str:\n"
        "        return self.a\n"
    )
    assert _pairs(planted) == ["PlantedError"]
