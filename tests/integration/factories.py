"""Operations in a chosen state, written by the path intake writes them.

A test that starts from an escalated or observing operation needs no worker to get it
there: the core opens it (``open_operation``), the factory places it in the state and
with the columns the test names (the intent event says it entered that state), and
``intake_store.insert`` writes it as intake does, in the same one statement: the row,
its timer row, its chained intent event, its ``created`` intake-log entry and any
notification its state owes. Later events go through ``store.write``, as a step's do.
So a row a test starts from is never shaped by a path production does not take.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy.orm import Session

from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.effects import Plan
from jobwarden.models.history.chain import EventDraft
from jobwarden.models.intake.intent import Intake, open_operation
from jobwarden.models.intake.submission import ACTOR_PREFIX, Submission
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import intake_store, store
from jobwarden.models.persistence.api_store import IntakeEntry
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from tests.unit.factories import SHIPPED


@cache
def _sandbox() -> ProviderContract:
    """The terms every factory operation opens under (its columns are then the test's)."""
    return load_contract(SHIPPED / "sandbox.toml")


def opened_in(
    state: S,
    *,
    at: datetime,
    tenant: str,
    requested_by: str = "submitter",
    actor: str | None = None,
    **columns: Any,
) -> tuple[Operation, Plan]:
    """An operation opened at ``at`` and placed in ``state``, with ``columns`` as given.

    The intent event enters ``state`` (as if the history had started there); ``actor``
    is that event's (submitter:<requested_by> when None).
    """
    op_id = columns.pop("operation_id", None) or uuid.uuid4()
    sub = Submission(
        tenant=tenant,
        provider="sandbox",
        idempotency_key=f"key-{op_id.hex}",
        command={"polls_to_finish": 1},
        requested_by=requested_by,
        source_event_id=None,
        method="POST",
        route="/v1/jobs",
        max_status_requests=None,
        result_deadline_seconds=None,
        max_transport_failures=None,
        cancel_deadline_seconds=None,
    )
    intake = Intake(
        operation_id=op_id,
        fingerprint=secrets.token_hex(32),
        trace_id=secrets.token_hex(16),
        actor=actor or f"{ACTOR_PREFIX}{requested_by}",
    )
    op, intent = open_operation(sub, _sandbox(), None, at, intake=intake)
    placed = op.with_changes(
        {
            "state": state.value,
            "authorized_by": None if state is S.awaiting_approval else requested_by,
            "updated_at": at,
            "state_since": at,
            **columns,
        }
    )
    (first,) = intent.events
    return placed, replace(intent, events=(replace(first, to_state=state.value),))


def created_entry(op: Operation, *, at: datetime | None = None) -> IntakeEntry:
    """The intake-log entry intake writes with a new operation (the Python door's)."""
    return IntakeEntry(
        at=at or op.created_at,
        door="python",
        actor=f"{ACTOR_PREFIX}{op.requested_by}",
        token_id=None,
        tenant=op.tenant,
        idempotency_key=op.idempotency_key,
        fingerprint=op.request_fingerprint,
        outcome="created",
        operation_id=op.operation_id,
        state=op.state.value,
        http_status=None,
        trace_id=op.trace_id,
    )


def insert_opened(
    session: Session, op: Operation, intent: Plan, later: Sequence[EventDraft] = ()
) -> Operation:
    """Write ``op`` as intake does (its intent), then ``later`` events as a step does."""
    stored = intake_store.insert(session, op, intent, created_entry(op), lock_timeout="5s")
    assert stored is not None, f"{op.tenant}/{op.idempotency_key} is taken"
    if later:
        stored = store.write(session, stored, Plan(events=tuple(later)), now=op.updated_at)
    return stored


def insert_in(
    url: str,
    state: S,
    *,
    at: datetime,
    tenant: str,
    later: Sequence[EventDraft] = (),
    **columns: Any,
) -> Operation:
    """An operation in ``state`` committed to ``url`` (see ``opened_in``), as stored."""
    op, intent = opened_in(state, at=at, tenant=tenant, **columns)
    with transaction(url) as session:
        return insert_opened(session, op, intent, later)
