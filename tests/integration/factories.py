"""Operations in a chosen state, written by the path intake writes them.

A test that starts from an escalated or observing operation needs no worker to get it
there: the core opens it (``open_operation``), the factory places it in the state and
with the columns the test names (the intent event says it entered that state), and
``intake_store.insert`` writes it as intake does, in the same one statement: the row,
its timer row, its chained intent event (or the history a test spells out), its
``created`` intake-log entry and any notification its state owes. So a row a test
starts from is never shaped by a path production does not take; the one exception,
``insert_legacy_row``, writes what older revisions left behind, and says so.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from dataclasses import fields, replace
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import column, insert, table
from sqlalchemy.orm import Session

from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.history.chain import GENESIS_HASH, EventDraft
from jobwarden.models.intake.intent import Intake, open_operation
from jobwarden.models.intake.submission import ACTOR_PREFIX, Submission
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import intake_store
from jobwarden.models.persistence.api_store import IntakeEntry
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import HOT_COLUMNS, OperationRow, TimerRow
from jobwarden.models.plan import Plan
from jobwarden.models.states import OperationState as S
from tests.unit.factories import SHIPPED


@cache
def _sandbox() -> ProviderContract:
    """The terms every factory operation opens under (its columns are then the test's)."""
    return load_contract(SHIPPED / "sandbox.toml")


class Opened(NamedTuple):
    """An operation as the core opened it and its intent plan, not yet written."""

    op: Operation
    intent: Plan


def opened_in(
    state: S,
    *,
    at: datetime,
    tenant: str,
    requested_by: str = "submitter",
    actor: str | None = None,
    **columns: Any,
) -> Opened:
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
    written = columns.get("updated_at", at)
    # A test names states and reasons as text or enums alike: read back as a row would be.
    placed = Operation.from_mapping(
        {
            **{f.name: getattr(op, f.name) for f in fields(op)},
            "state": state,
            "authorized_by": None if state is S.awaiting_approval else requested_by,
            "updated_at": written,
            # It entered its state when it was last written, unless the test says when.
            "state_since": written,
            **columns,
        }
    )
    (first,) = intent.events
    return Opened(placed, replace(intent, events=(replace(first, to_state=state.value),)))


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


def with_history(row: Opened, events: Sequence[EventDraft]) -> Opened:
    """``row`` with the history a test spells out (its first event the intent), chained
    by the insert, the last event bound to the row as inserted."""
    return row._replace(intent=replace(row.intent, events=tuple(events)))


def insert_opened(session: Session, op: Operation, intent: Plan) -> Operation:
    """Write ``op`` and its history as intake does; the operation as stored."""
    stored = intake_store.insert(session, op, intent, created_entry(op), lock_timeout="5s")
    assert stored is not None, f"{op.tenant}/{op.idempotency_key} is taken"
    return stored


def insert_in(
    url: str,
    state: S,
    *,
    at: datetime,
    tenant: str,
    **columns: Any,
) -> Operation:
    """An operation in ``state`` committed to ``url`` (see ``opened_in``), as stored."""
    op, intent = opened_in(state, at=at, tenant=tenant, **columns)
    with transaction(url) as session:
        return insert_opened(session, op, intent)


def insert_legacy_row(
    session: Session,
    op: Operation,
    *,
    absent: frozenset[str] = frozenset(),
    before_0033: bool = False,
) -> None:
    """``op``'s row and timer as code before today's wrote them, without any event: for
    tests of what older revisions left behind (no row digests, an older table).

    ``absent``: columns that revision's table did not have yet (NULL here, so the row
    digest is the same). ``before_0033``: the timer row holds only the timer and the
    operations row everything else, as before the hot row. Plain INSERTs: the row's
    history is the test's to write.
    """
    hot = ("next_poll_at", "dispatched_at") if before_0033 else tuple(sorted(HOT_COLUMNS))
    types = {c.name: c.type for t in (OperationRow.__table__, TimerRow.__table__) for c in t.c}
    values = {c: getattr(op, c) for c in types if c not in absent}
    values |= {
        "state": op.state.value,
        "version": 1,
        "event_count": 0,
        "last_event_hash": GENESIS_HASH,
        "state_since": op.updated_at,
    }
    written = {k: v for k, v in values.items() if v is not None and k not in hot}
    operations = table("operations", *(column(k, types[k]) for k in written))
    session.execute(insert(operations).values(written))
    timer = {k: v for k, v in values.items() if v is not None and k in hot}
    timers = table("operation_timers", *(column(k, types[k]) for k in ("operation_id", *timer)))
    session.execute(insert(timers).values(operation_id=op.operation_id, **timer))
