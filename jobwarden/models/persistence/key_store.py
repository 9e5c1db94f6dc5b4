"""The reserved-key audit's one query (models/intake/key_audit.py judges what it finds).

A scan of operations whose key starts with a reserved prefix (case-insensitively, as
intake refuses them): an operator's audit, run by hand, not a hot path.
"""

from __future__ import annotations

from sqlalchemy import func, or_, select, true
from sqlalchemy.orm import Session

from jobwarden.models.intake.key_audit import KeyedOperation
from jobwarden.models.intake.reserved_keys import RESERVED
from jobwarden.models.persistence.api_tables import IntakeLogRow
from jobwarden.models.persistence.schedule_tables import ScheduleRow, ScheduleSlotRow
from jobwarden.models.persistence.tables import OperationRow


def keyed_operations(session: Session, tenant: str | None = None) -> list[KeyedOperation]:
    """Every operation (of ``tenant``, or all) whose key lies in a reserved namespace."""
    folded = func.lower(OperationRow.idempotency_key)
    created = (
        select(IntakeLogRow.door, IntakeLogRow.actor)
        .where(IntakeLogRow.operation_id == OperationRow.operation_id)
        .where(IntakeLogRow.outcome == "created")
        .order_by(IntakeLogRow.entry_id)
        .limit(1)
        .lateral("created")
    )
    query = (
        select(
            OperationRow.operation_id,
            OperationRow.tenant,
            OperationRow.idempotency_key,
            OperationRow.created_at,
            OperationRow.resubmit_of,
            ScheduleRow.name,
            ScheduleSlotRow.slot_at,
            created.c.door,
            created.c.actor,
        )
        .outerjoin(ScheduleSlotRow, ScheduleSlotRow.operation_id == OperationRow.operation_id)
        .outerjoin(ScheduleRow, ScheduleRow.schedule_id == ScheduleSlotRow.schedule_id)
        .outerjoin(created, true())
        # LIKE's own wildcards: no reserved prefix holds "%" or "_" (see its test).
        .where(or_(*(folded.like(f"{n.prefix}%") for n in RESERVED)))
        .order_by(OperationRow.created_at, OperationRow.operation_id)
    )
    if tenant is not None:
        query = query.where(OperationRow.tenant == tenant)
    return [
        KeyedOperation(
            operation_id=r.operation_id,
            tenant=r.tenant,
            idempotency_key=r.idempotency_key,
            created_at=r.created_at,
            resubmit_of=r.resubmit_of,
            slot=(r.name, r.slot_at) if r.name is not None else None,
            door=r.door,
            actor=r.actor,
        )
        for r in session.execute(query)
    ]
