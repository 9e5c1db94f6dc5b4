"""Follow-up operations in Postgres: the parent's lock, the amounts so far, the family.

The amount rule (models/intake/follow_ups.py) holds only if no two follow-ups of one
parent are both admitted against the same remainder. Intake therefore takes the
parent's row lock (``FOR NO KEY UPDATE``: it serialises the follow-ups of one parent,
and still lets the child's foreign key check, a ``KEY SHARE`` lock, pass) before it
sums what the parent's live follow-ups of the kind requested, and holds it until the
child's row is committed. A concurrent follow-up waits on the lock and then sums the
first one's amount too.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, func, select
from sqlalchemy.orm import Session

from jobwarden.models.intake.follow_ups import RELEASED_STATES
from jobwarden.models.persistence.tables import OperationRow
from jobwarden.models.states import OperationState

OPERATIONS = cast(Table, OperationRow.__table__)


def lock_parent(session: Session, parent: uuid.UUID) -> OperationState | None:
    """Lock the parent's row until this transaction ends; its state now (None: gone)."""
    state = session.execute(
        select(OPERATIONS.c.state)
        .where(OPERATIONS.c.operation_id == parent)
        .with_for_update(key_share=True)  # FOR NO KEY UPDATE
    ).scalar_one_or_none()
    return OperationState(state) if state is not None else None


def requested_so_far(session: Session, parent: uuid.UUID, kind: str) -> int:
    """What the parent's follow-ups of ``kind`` request, but those released by their end."""
    total = session.execute(
        select(func.coalesce(func.sum(OPERATIONS.c.follow_up_amount), 0)).where(
            OPERATIONS.c.follows == parent,
            OPERATIONS.c.follow_up_kind == kind,
            OPERATIONS.c.state.not_in([s.value for s in RELEASED_STATES]),
        )
    ).scalar_one()
    return int(total)


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilyMember:
    """One follow-up of a parent, as the family view lists it."""

    operation_id: uuid.UUID
    kind: str
    state: OperationState
    amount: int | None
    requested_by: str
    created_at: datetime

    def as_dict(self) -> dict[str, object]:
        return {
            "operation_id": str(self.operation_id),
            "kind": self.kind,
            "state": self.state.value,
            "amount": self.amount,
            "requested_by": self.requested_by,
            "created_at": self.created_at.isoformat(),
        }


# A family is shown, not paged: a parent with more follow-ups than this shows the first.
MAX_FAMILY = 200


def follow_ups_of(session: Session, parent: uuid.UUID) -> list[FamilyMember]:
    """The parent's follow-ups, oldest first."""
    rows = session.execute(
        select(
            OPERATIONS.c.operation_id,
            OPERATIONS.c.follow_up_kind,
            OPERATIONS.c.state,
            OPERATIONS.c.follow_up_amount,
            OPERATIONS.c.requested_by,
            OPERATIONS.c.created_at,
        )
        .where(OPERATIONS.c.follows == parent)
        .order_by(OPERATIONS.c.created_at, OPERATIONS.c.operation_id)
        .limit(MAX_FAMILY)
    ).all()
    return [
        FamilyMember(
            operation_id=r.operation_id,
            kind=r.follow_up_kind,
            state=OperationState(r.state),
            amount=r.follow_up_amount,
            requested_by=r.requested_by,
            created_at=r.created_at,
        )
        for r in rows
    ]
