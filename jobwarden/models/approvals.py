"""An approval of an operation waiting for one: bound to its fingerprint, and expiring.

Pure: the frozen operation, what the approver named and the time in, the write out.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from jobwarden.models.actions import Decided, Record
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.states import OperationState as S


def decide_approval(
    op: Operation, *, fingerprint: str, approver: str, now: datetime, valid_for: timedelta
) -> Decided:
    """The approval as the write it makes; RefusedInputError when it may not be given.

    Refused when the operation is not awaiting approval or the fingerprint differs (a
    changed payload needs a new approval).
    """
    if op.state is not S.awaiting_approval:
        raise RefusedInputError(f"operation {op.operation_id} is not awaiting approval")
    if op.request_fingerprint != fingerprint:
        raise RefusedInputError(
            "the approval names a different fingerprint than the "
            "operation's; a changed payload needs a new approval"
        )
    # An approval expires: the create step refuses to send under a stale one, so an
    # approval given today cannot authorize a create a week from now.
    expires = now + valid_for
    record = Record(
        event=EventKind.approved,
        to=S.create_pending,
        excerpt={"fingerprint": fingerprint, "expires_at": expires.isoformat()},
        wake_at=now,
    )
    return Decided(
        action=record, changes={"authorized_by": approver, "approval_expires_at": expires}
    )
