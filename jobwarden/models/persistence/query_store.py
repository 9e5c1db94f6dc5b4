"""The HTTP API's reads: one operation, a tenant's operations, its history, escalations.

Every query is scoped to a tenant in SQL, so another tenant's operation is
simply not found: the caller cannot tell it from one that does not exist.
Lists are keyset-paginated on (created_at, operation_id) — or (updated_at,
operation_id) for escalations — so a deep page costs what the first one does,
and a row inserted while a client pages through is never shown twice. The
indexes these queries need are declared on ``OperationRow`` (migration 0010).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, func, select, tuple_
from sqlalchemy.orm import Session

from jobwarden.models.operation import Operation
from jobwarden.models.persistence import store
from jobwarden.models.persistence.tables import (
    HOLD,
    HOT_JOIN,
    NEEDS_A_HUMAN,
    OPERATION_WITH_TIMER,
    EventRow,
    OperationRow,
    TimerRow,
)
from jobwarden.models.states import OperationState

OPERATIONS = cast(Table, OperationRow.__table__)
EVENTS = cast(Table, EventRow.__table__)
TIMERS = cast(Table, TimerRow.__table__)

# The columns a list shows: enough to pick an operation, not its whole row.
_SUMMARY = (
    OPERATIONS.c.operation_id,
    OPERATIONS.c.provider,
    OPERATIONS.c.state,
    OPERATIONS.c.remote_job_id,
    OPERATIONS.c.idempotency_key,
    OPERATIONS.c.escalation_reason,
    OPERATIONS.c.requested_by,
    OPERATIONS.c.created_at,
    TIMERS.c.updated_at,  # in the hot row (0033): the lists join it
)


# A page's size, for every door that lists (the HTTP API, the MCP tools, the CLI).
MAX_LIMIT = 200
DEFAULT_LIMIT = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class Position:
    """Where a page ended: the sort key of its last row (an opaque cursor to the client)."""

    at: datetime
    operation_id: uuid.UUID


class InvalidCursorError(ValueError):
    """A cursor that no list returned; each door says so in its own words."""


# An opaque cursor: base64url of "<ISO timestamp>|<operation id>", the sort key of the last
# row shown. Forging one reveals nothing: every page is filtered by the caller's tenant.
# Here rather than in the HTTP door: the CLI pages with the same cursors on the core
# install, where FastAPI is not installed (issue 36).
def encode_cursor(position: Position) -> str:
    raw = f"{position.at.isoformat()}|{position.operation_id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> Position:
    """The position a cursor names; InvalidCursorError when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        at, _, op_id = raw.partition("|")
        position = Position(at=datetime.fromisoformat(at), operation_id=uuid.UUID(op_id))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursorError(f"not a cursor a list returned: {cursor!r}") from None
    if position.at.tzinfo is None:
        raise InvalidCursorError(f"not a cursor a list returned: {cursor!r}")
    return position


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationFilter:
    """A tenant's list query; every field but tenant and limit is optional."""

    tenant: str
    limit: int
    state: OperationState | None = None
    reason: str | None = None
    provider: str | None = None
    remote_job_id: str | None = None
    idempotency_key: str | None = None
    since: datetime | None = None
    after: Position | None = None
    # The console lists the newest first (what an operator looks for is what just
    # happened); the API pages oldest first, so a client that follows links.next while
    # rows are inserted sees each one exactly once, the new ones at the end.
    newest_first: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    rows: Sequence[Mapping[str, Any]]
    # The position to continue from; None on the last page.
    next: Position | None


def operation_for_tenant(
    session: Session, tenant: str, operation_id: uuid.UUID
) -> Operation | None:
    """The tenant's operation, or None when there is none (or it is another tenant's)."""
    found = session.execute(
        # With the hold (the pause covering it), as a step's snapshot reads it.
        OPERATION_WITH_TIMER.add_columns(HOLD)
        .where(OPERATIONS.c.operation_id == operation_id)
        .where(OPERATIONS.c.tenant == tenant)
    ).first()
    return Operation.from_mapping(dict(found._mapping)) if found is not None else None


def _page(rows: Sequence[Any], limit: int, key: str) -> Page:
    # One row more than asked says whether a next page exists without a COUNT.
    shown = [dict(r._mapping) for r in rows[:limit]]
    more = len(rows) > limit
    last = shown[-1] if shown and more else None
    nxt = Position(at=last[key], operation_id=last["operation_id"]) if last else None
    return Page(rows=shown, next=nxt)


def list_operations(session: Session, f: OperationFilter) -> Page:
    """One page of the tenant's operations, oldest first (newest first if the filter says
    so), matching every given filter."""
    query = select(*_SUMMARY).select_from(HOT_JOIN).where(OPERATIONS.c.tenant == f.tenant)
    if f.state is not None:
        query = query.where(OPERATIONS.c.state == f.state.value)
    if f.reason is not None:
        query = query.where(OPERATIONS.c.escalation_reason == f.reason)
    if f.provider is not None:
        query = query.where(OPERATIONS.c.provider == f.provider)
    if f.remote_job_id is not None:
        query = query.where(OPERATIONS.c.remote_job_id == f.remote_job_id)
    if f.idempotency_key is not None:
        query = query.where(OPERATIONS.c.idempotency_key == f.idempotency_key)
    if f.since is not None:
        query = query.where(OPERATIONS.c.created_at >= f.since)
    key = tuple_(OPERATIONS.c.created_at, OPERATIONS.c.operation_id)
    if f.after is not None:
        # A row comparison, so Postgres walks the (…, created_at, operation_id) index (in
        # either direction).
        last = tuple_(f.after.at, f.after.operation_id)
        query = query.where(key < last if f.newest_first else key > last)
    order = (
        (OPERATIONS.c.created_at.desc(), OPERATIONS.c.operation_id.desc())
        if f.newest_first
        else (OPERATIONS.c.created_at, OPERATIONS.c.operation_id)
    )
    query = query.order_by(*order).limit(f.limit + 1)
    return _page(session.execute(query).all(), f.limit, "created_at")


def escalations(session: Session, tenant: str, *, limit: int, after: Position | None) -> Page:
    """The tenant's operations that need a human, longest waiting first.

    Ordered by when each entered the state it waits in (``state_since``: when it
    stopped, or, awaiting approval, when it was submitted).
    """
    query = (
        select(*_SUMMARY, OPERATIONS.c.escalation_detail, OPERATIONS.c.state_since)
        .select_from(HOT_JOIN)
        .where(OPERATIONS.c.tenant == tenant)
        .where(OPERATIONS.c.state.in_([s.value for s in NEEDS_A_HUMAN]))
    )
    if after is not None:
        query = query.where(
            tuple_(OPERATIONS.c.state_since, OPERATIONS.c.operation_id)
            > tuple_(after.at, after.operation_id)
        )
    query = query.order_by(OPERATIONS.c.state_since, OPERATIONS.c.operation_id).limit(limit + 1)
    return _page(session.execute(query).all(), limit, "state_since")


def escalation_counts(session: Session, tenant: str) -> list[tuple[str, str | None, int]]:
    """(state, escalation reason, count) of everything the tenant has waiting for a human."""
    rows = session.execute(
        select(OPERATIONS.c.state, OPERATIONS.c.escalation_reason, func.count())
        .where(OPERATIONS.c.tenant == tenant)
        .where(OPERATIONS.c.state.in_([s.value for s in NEEDS_A_HUMAN]))
        .group_by(OPERATIONS.c.state, OPERATIONS.c.escalation_reason)
        .order_by(OPERATIONS.c.state, OPERATIONS.c.escalation_reason)
    )
    return [(state, reason, int(count)) for state, reason, count in rows]


def history(session: Session, operation_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every event of the operation in order, as stored (the caller checked the tenant)."""
    rows = session.execute(
        select(
            EVENTS.c.seq,
            EVENTS.c.at,
            EVENTS.c.actor,
            EVENTS.c.kind,
            EVENTS.c.from_state,
            EVENTS.c.to_state,
            EVENTS.c.cause,
            EVENTS.c.delay_source,
            EVENTS.c.http_status,
            EVENTS.c.provider_request_id,
            EVENTS.c.excerpt,
        )
        .where(EVENTS.c.operation_id == operation_id, store.own_partition(operation_id))
        .order_by(EVENTS.c.seq)
    )
    return [dict(r._mapping) for r in rows]
