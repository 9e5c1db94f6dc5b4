"""SQL of the HTTP door: API tokens, tenants' settings and the append-only intake log.

Helpers take the session and never commit; the caller's transaction does.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from jobwarden.models.persistence.api_tables import ApiTenantRow, ApiTokenRow, IntakeLogRow


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenRecord:
    token_id: uuid.UUID
    tenant: str
    name: str
    scopes: tuple[str, ...]
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    allows_self_approval: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class IntakeEntry:
    """One submission attempt through any door, as the intake log holds it."""

    at: datetime
    door: str
    actor: str
    token_id: uuid.UUID | None
    tenant: str
    idempotency_key: str
    fingerprint: str | None
    outcome: str
    operation_id: uuid.UUID | None
    state: str | None = None
    http_status: int | None
    trace_id: str | None
    detail: str | None = None


_TOKEN_COLUMNS = (
    ApiTokenRow.token_id,
    ApiTokenRow.tenant,
    ApiTokenRow.name,
    ApiTokenRow.scopes,
    ApiTokenRow.created_at,
    ApiTokenRow.last_used_at,
    ApiTokenRow.revoked_at,
    ApiTenantRow.allow_self_approval,
)


def _token(row: Any) -> TokenRecord:
    return TokenRecord(
        token_id=row.token_id,
        tenant=row.tenant,
        name=row.name,
        scopes=tuple(row.scopes),
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
        allows_self_approval=bool(row.allow_self_approval),
    )


def _tokens_query() -> Any:
    return select(*_TOKEN_COLUMNS).outerjoin(
        ApiTenantRow, ApiTenantRow.tenant == ApiTokenRow.tenant
    )


def insert_token(  # noqa: PLR0913 - one keyword per column of the new row
    session: Session,
    *,
    token_id: uuid.UUID,
    tenant: str,
    name: str,
    secret_hash: str,
    scopes: Sequence[str],
    now: datetime,
) -> None:
    session.execute(
        insert(ApiTokenRow).values(
            token_id=token_id,
            tenant=tenant,
            name=name,
            secret_hash=secret_hash,
            scopes=list(scopes),
            created_at=now,
        )
    )


def token_by_hash(session: Session, secret_hash: str) -> TokenRecord | None:
    """The token with this secret hash and its tenant's settings, in one round trip."""
    row = session.execute(
        _tokens_query().where(ApiTokenRow.secret_hash == secret_hash)
    ).one_or_none()
    return None if row is None else _token(row)


def list_tokens(session: Session) -> list[TokenRecord]:
    rows = session.execute(_tokens_query().order_by(ApiTokenRow.created_at, ApiTokenRow.token_id))
    return [_token(r) for r in rows]


def touch_token(
    session: Session, token_id: uuid.UUID, *, now: datetime, unless_after: datetime
) -> bool:
    """Record a use unless one after ``unless_after`` is recorded; concurrent uses write once."""
    result = session.execute(
        update(ApiTokenRow)
        .where(ApiTokenRow.token_id == token_id)
        .where((ApiTokenRow.last_used_at.is_(None)) | (ApiTokenRow.last_used_at <= unless_after))
        .values(last_used_at=now)
    )
    return bool(getattr(result, "rowcount", 0))


def revoke_token(session: Session, token_id: uuid.UUID, *, now: datetime) -> bool:
    """Revoke a live token; False if there is none (unknown or already revoked)."""
    result = session.execute(
        update(ApiTokenRow)
        .where(ApiTokenRow.token_id == token_id, ApiTokenRow.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    return bool(getattr(result, "rowcount", 0))


def set_self_approval(session: Session, tenant: str, *, allow: bool, now: datetime) -> None:
    stmt = pg_insert(ApiTenantRow).values(tenant=tenant, allow_self_approval=allow, updated_at=now)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[ApiTenantRow.tenant],
            set_={"allow_self_approval": allow, "updated_at": now},
        )
    )


def allows_self_approval(session: Session, tenant: str) -> bool:
    value = session.scalar(
        select(ApiTenantRow.allow_self_approval).where(ApiTenantRow.tenant == tenant)
    )
    return bool(value)


def append_intake(session: Session, entry: IntakeEntry) -> None:
    session.execute(
        insert(IntakeLogRow).values(
            at=entry.at,
            door=entry.door,
            actor=entry.actor,
            token_id=entry.token_id,
            tenant=entry.tenant,
            idempotency_key=entry.idempotency_key,
            fingerprint=entry.fingerprint,
            outcome=entry.outcome,
            operation_id=entry.operation_id,
            state=entry.state,
            http_status=entry.http_status,
            trace_id=entry.trace_id,
            detail=entry.detail,
        )
    )


def _entry(row: IntakeLogRow) -> IntakeEntry:
    return IntakeEntry(
        at=row.at,
        door=row.door,
        actor=row.actor,
        token_id=row.token_id,
        tenant=row.tenant,
        idempotency_key=row.idempotency_key,
        fingerprint=row.fingerprint,
        outcome=row.outcome,
        operation_id=row.operation_id,
        state=row.state,
        http_status=row.http_status,
        trace_id=row.trace_id,
        detail=row.detail,
    )


def intake_for_operation(session: Session, operation_id: uuid.UUID) -> list[IntakeEntry]:
    """Every attempt that named this operation, oldest first.

    Attempts that found the key in progress name no operation; the log still holds
    them under the tenant and key (intake_for_key).
    """
    rows = session.scalars(
        select(IntakeLogRow)
        .where(IntakeLogRow.operation_id == operation_id)
        .order_by(IntakeLogRow.entry_id)
    )
    return [_entry(r) for r in rows]


def created_state(session: Session, operation_id: uuid.UUID) -> str | None:
    """The state the answer that created this operation named, if it is on the log."""
    return session.scalar(
        select(IntakeLogRow.state)
        .where(IntakeLogRow.operation_id == operation_id, IntakeLogRow.outcome == "created")
        .order_by(IntakeLogRow.entry_id)
        .limit(1)
    )


def created_by(session: Session, operation_id: uuid.UUID) -> tuple[str, str] | None:
    """The door and actor of the answer that created this operation, if it is on the log."""
    row = session.execute(
        select(IntakeLogRow.door, IntakeLogRow.actor)
        .where(IntakeLogRow.operation_id == operation_id, IntakeLogRow.outcome == "created")
        .order_by(IntakeLogRow.entry_id)
        .limit(1)
    ).first()
    return (row.door, row.actor) if row is not None else None


def intake_for_key(session: Session, tenant: str, idempotency_key: str) -> list[IntakeEntry]:
    rows = session.scalars(
        select(IntakeLogRow)
        .where(IntakeLogRow.tenant == tenant, IntakeLogRow.idempotency_key == idempotency_key)
        .order_by(IntakeLogRow.entry_id)
    )
    return [_entry(r) for r in rows]
