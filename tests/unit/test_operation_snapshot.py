"""``Operation.with_changes`` is ``dataclasses.replace`` without its per-field Python walk.

The snapshot after a write is built twice per poll, so it steps around ``replace``
(models/operation.py says what it skips and why that is safe); these tests hold the two
equal over every field and keep replace's refusal of a name that is no field.
"""

from __future__ import annotations

import uuid
from dataclasses import FrozenInstanceError, fields, replace
from datetime import timedelta
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.states import OperationState
from tests.unit.factories import NOW, operation

FIELD_NAMES = [f.name for f in fields(Operation)]


def _other_value(name: str, value: Any) -> Any:
    """A value for ``name`` that differs from ``value`` (its type need not match: the
    snapshot never checks types, and neither did replace)."""
    return ("changed", name, value)


def test_every_field_changed_alone_matches_replace() -> None:
    op = operation(OperationState.observing, remote_job_id="job-1")
    for name in FIELD_NAMES:
        changes = cast(RowChanges, {name: _other_value(name, getattr(op, name))})
        assert op.with_changes(changes) == replace(op, **changes), name


@given(st.sets(st.sampled_from(FIELD_NAMES)))
def test_any_set_of_changes_matches_replace(names: set[str]) -> None:
    op = operation(OperationState.observing)
    changes = cast(RowChanges, {n: _other_value(n, getattr(op, n)) for n in names})
    changed = op.with_changes(changes)
    assert changed == replace(op, **changes)
    # Every field is set on the new snapshot (a missed slot would raise AttributeError).
    assert [getattr(changed, n) for n in FIELD_NAMES] == [
        getattr(replace(op, **changes), n) for n in FIELD_NAMES
    ]


def test_a_poll_write_leaves_the_original_snapshot_untouched_and_frozen() -> None:
    op = operation(OperationState.observing)
    changes: RowChanges = {
        "version": op.version + 1,
        "updated_at": NOW + timedelta(seconds=1),
        "status_requests_used": 1,
        "next_poll_at": NOW + timedelta(seconds=5),
        "last_event_kind": EventKind.observed,
    }
    changed = op.with_changes(changes)
    assert changed is not op
    assert op.version == 3 and op.status_requests_used == 0
    assert changed.version == 4 and changed.next_poll_at == NOW + timedelta(seconds=5)
    with pytest.raises(FrozenInstanceError):
        changed.version = 5  # type: ignore[misc]
    assert type(changed) is Operation
    assert changed.operation_id == uuid.UUID(int=1)


def test_a_name_that_is_no_field_is_refused_as_replace_refuses_it() -> None:
    op = operation()
    with pytest.raises(TypeError):
        replace(op, no_such_column=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="no_such_column"):
        op.with_changes(cast(RowChanges, {"no_such_column": 1}))
