"""The operation's columns are spelled once: the ``Operation`` snapshot.

Every other place that names them is derived from it or checked here against it: the
table (tables.OperationRow with its timer row), RowChanges
(tests/unit/test_row_changes_typing.py), the intent a submission opens (only what intake
decides is spelled; the rest starts empty, from the snapshot's types) and the view both
doors show (each column shown, or named below as kept back, with the reason).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import uuid
from dataclasses import fields, replace
from typing import cast

from sqlalchemy import Table

from jobwarden.api import queries
from jobwarden.models.intake.intent import Intake, open_operation
from jobwarden.models.operation import COLUMNS, Operation
from jobwarden.models.persistence.tables import HOT_COLUMNS, OperationRow, TimerRow
from tests.unit.factories import NOW, contract, submission

# Columns the operation view does not show, each with why: a new column must be shown
# or named here, so leaving it out of the API is a decision, not an accident.
KEPT_BACK = {
    "provider_token": "travels in the create request, shown beside the view as it leaves",
    "method": "part of the create request shown beside the view",
    "route": "part of the create request shown beside the view",
    "command": "part of the create request shown beside the view",
    "status_url": "the provider's address for the job, used by the steps only",
    "version": "the fence of our writes, meaningless to a caller",
    "cancel_window_seconds": "the submission's bound; the cancel deadline it sets is shown",
    "dispatched_at": "when a wake-up was handed to the broker: delivery bookkeeping",
    "consecutive_rate_limited": "the rate-limit stop's own count; a stop shows its reason",
    "poll_attempt": "the backoff's step number, shown as next_poll_at",
    "extensions_used": "bounds the extend option; the options offered account for it",
    "step_failures": "bounds a crashing step; its stop shows the reason",
    "first_sent_at": "a header value sent again on every create attempt",
    "reserved_request": "the next poll's reservation, internal to the step",
    "concurrency_key": "recorded in the intent event, which the story shows",
    "concurrency_limit": "the contract's limit the key was admitted under, internal",
    "polling_mode": "how an Azure convention polls, internal to the step",
    "ended_as": "the ending a cleanup waits to confirm, internal to the cleanup step",
    "cleanup_deadline": "the cleanup's own bound; the history records it",
    "approved_request_digest": "recorded in the approval event, which the story shows",
    "contract_digest": "recorded in the intent event; `providers check` reports versions",
    "estimated_finish": "the progress extrapolation, recorded in the wait decisions",
    "result_reference": "the provider's reference for the result; the result view shows ours",
    "event_count": "the chain head; the story and verify show the history itself",
    "last_event_hash": "the chain head; the story and verify show the history itself",
    "state_since": "shown as waiting_since by the escalations list",
    "last_event_kind": "the history's last entry shows it",
}


def test_the_table_holds_the_snapshots_columns_and_no_other() -> None:
    operations = cast(Table, OperationRow.__table__)
    timers = cast(Table, TimerRow.__table__)
    assert set(operations.c.keys()) | HOT_COLUMNS == COLUMNS
    assert set(timers.c.keys()) == HOT_COLUMNS | {"operation_id"}
    assert {f.name for f in fields(Operation)} - {"hold"} == COLUMNS


def test_every_column_is_shown_by_the_operation_view_or_kept_back_with_a_reason() -> None:
    source = textwrap.dedent(inspect.getsource(queries.operation_view))
    read = {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "row"
    }
    shown = read & COLUMNS
    assert shown | set(KEPT_BACK) == COLUMNS, sorted(COLUMNS - shown - set(KEPT_BACK))
    assert not shown & set(KEPT_BACK), sorted(shown & set(KEPT_BACK))


def test_a_new_operation_starts_empty_in_every_column_intake_does_not_decide() -> None:
    intake = Intake(
        operation_id=uuid.UUID(int=7), fingerprint="f" * 64, trace_id="a" * 32, actor="a"
    )
    approving = replace(contract(), requires_approval=True)
    op, _ = open_operation(submission(), approving, None, NOW, intake=intake)
    # Nothing observed, sent or counted yet; no remote job, no escalation, no result.
    for name in (
        "remote_job_id",
        "status_url",
        "authorized_by",
        "accepted_at",
        "create_attempts",
        "status_requests_used",
        "transport_failures_used",
        "step_failures",
        "reserved_request",
        "last_remote_state",
        "progress",
        "escalation_reason",
        "result_reference",
        "validation_summary",
        "event_count",
        "estimated_finish",
    ):
        assert getattr(op, name) in (None, 0), name
    assert (op.version, op.state_since, op.updated_at) == (1, NOW, NOW)
