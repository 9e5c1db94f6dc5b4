"""Plan.changes and a decision's changes are typed over Operation's columns: a misspelt
column is a mypy error.

The typing half runs mypy itself (``mypy.api``) on two small snippets, so the check
is part of pytest and cannot rot into a comment nobody runs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mypy import api

from jobwarden.models.operation import COLUMNS, RowChanges
from jobwarden.models.plan import Plan

_ROOT = Path(__file__).resolve().parents[2]
_SNIPPET = """\
from datetime import datetime, timezone

from jobwarden.models.actions import Decided, Move
from jobwarden.models.plan import Plan
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import RowChanges
from jobwarden.models.states import OperationState

at = datetime.now(timezone.utc)
changes: RowChanges = {{"{key}": at}}
plan = Plan(changes={{"state": OperationState.observing, "{key}": at}})
move = Move(to=OperationState.observing, event=EventKind.decision, cause="c", wake_at=at)
decided = Decided(action=move, changes={{"{key}": at}})
"""


# States, reasons, endings and polling modes are their enums up to the store's door: the
# text of one ("observing") is a type error, so a typo cannot reach the UPDATE.
_TEXT_FOR_ENUMS = """\
from jobwarden.models.operation import RowChanges

changes: RowChanges = {{
    "state": "observing",
    "escalation_reason": "rate_limited",
    "ended_as": "failed",
    "polling_mode": "location",
}}
"""


# The three snippets, checked by ONE mypy run (each run loads the project's cache and the
# imported package: about twenty seconds of CPU in a busy suite, so one, not three).
_SNIPPETS = {
    "misspelt": _SNIPPET.format(key="next_pol_at"),
    "column": _SNIPPET.format(key="next_poll_at"),
    "text_for_enums": _TEXT_FOR_ENUMS.format(),
}


@pytest.fixture(scope="module")
def mypy_lines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """mypy's report on each snippet (its lines, by the snippet's name)."""
    folder = tmp_path_factory.mktemp("snippets")
    files = []
    for name, source in _SNIPPETS.items():
        files.append(folder / f"{name}.py")
        files[-1].write_text(textwrap.dedent(source), encoding="utf-8")
    out, err, _ = api.run(
        [
            # The project's settings and cache (a warm cache keeps this to seconds); the
            # imported package is checked by the project's own mypy run, not reported here.
            "--config-file",
            str(_ROOT / "pyproject.toml"),
            "--follow-imports",
            "silent",
            "--no-error-summary",
            *map(str, files),
        ]
    )
    assert not err, err
    lines = out.splitlines()
    return {name: "\n".join(x for x in lines if f"{name}.py:" in x) for name in _SNIPPETS}


def test_a_misspelt_change_key_is_a_type_error(mypy_lines: dict[str, str]) -> None:
    out = mypy_lines["misspelt"]
    # The plan's changes, and a decision's own (Decided.changes), are both checked.
    assert out.count("[typeddict-unknown-key]") == 3, out
    assert '"next_pol_at"' in out


def test_a_real_column_type_checks(mypy_lines: dict[str, str]) -> None:
    assert mypy_lines["column"] == ""


def test_a_state_reason_ending_or_polling_mode_given_as_text_is_a_type_error(
    mypy_lines: dict[str, str],
) -> None:
    out = mypy_lines["text_for_enums"]
    for key in ("state", "escalation_reason", "ended_as", "polling_mode"):
        assert f'TypedDict item "{key}" has type' in out, out


def test_row_changes_name_every_column_but_the_identity() -> None:
    # Kept in step with the snapshot: a new column is writable only once it is typed here.
    assert set(RowChanges.__optional_keys__) == COLUMNS - {"operation_id"}
    assert not RowChanges.__required_keys__


def test_an_empty_plan_has_no_changes() -> None:
    assert Plan().changes == {}
    assert Plan().empty
