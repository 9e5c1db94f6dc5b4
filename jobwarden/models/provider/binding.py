"""The send keeps the approval's word: only the create that was approved may leave.

An approval binds the digest of the create as it was shown (``outgoing.request_digest``;
the operation's ``approved_request_digest``). Before a create leaves, the step renders
the request it is about to send the same way and asks ``decide_binding``: equal digests
send; any difference (a base URL moved by ``base_url_env``, a contract's headers, the
credential's reference) sends nothing (DESIGN invariant 13) and is recorded with both
digests as ``approval_stale``:

- in ``create_pending`` no remote job can exist (an ambiguous send would have moved it
  to ``create_unknown``), so the operation goes back to ``awaiting_approval`` for a new
  approval, with a fresh approval window (capped by the business deadline): the old
  approval is void, its digest, expiry and approvers cleared (the history keeps them);
- in ``create_unknown`` (a same-token retry of reconciliation) a create may have reached
  the approved target already: sending it elsewhere could make a second job, so the
  operation stops for a person, escalated ``approval_stale``.

Pure: the snapshot, the digest of the request about to leave, the time and the window in.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from jobwarden.models.actions import Decided, EscalationReason, Record, escalate
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.polling.business_deadline import earlier
from jobwarden.models.states import OperationState as S

APPROVAL_STALE: Final = "approval_stale"


def stale_detail(approved: str, current: str, request_line: str) -> str:
    return (
        f"the create to send, {request_line} (request digest {current}), "
        f"is not the one approved (request digest {approved}); nothing was sent, a new "
        "approval is needed"
    )


def decide_binding(
    op: Operation,
    *,
    request_digest: str,
    request_line: str,
    now: datetime,
    window: timedelta,
) -> Decided | None:
    """None when the create may leave: nothing is bound (no approval was needed, or it
    was given before requests were bound) or the digests are equal. Otherwise the stop,
    naming both digests and the request that would have left (``request_line``,
    ``METHOD URL`` as shown: no secret in it)."""
    approved = op.approved_request_digest
    if approved is None or approved == request_digest:
        return None
    excerpt = {
        "reason": APPROVAL_STALE,
        "approved_request_digest": approved,
        "request_digest": request_digest,
        "request": request_line,
    }
    detail = stale_detail(approved, request_digest, request_line)
    if op.state is not S.create_pending:
        stop = escalate(op.state, EscalationReason.approval_stale, detail)
        return Decided(action=stop)
    # A new wait for approval: its own window from now, never past the business deadline
    # (the approval-window step ends it approval_expired at the timer, as at intake).
    back = Record(
        event=EventKind.approval_stale,
        to=S.awaiting_approval,
        cause=detail,
        excerpt=excerpt,
        wake_at=earlier(now + window, op.business_deadline),
    )
    return Decided(
        action=back,
        # The approval is void: nobody has authorized the request that would leave now.
        changes={
            "approved_request_digest": None,
            "approval_expires_at": None,
            "authorized_by": None,
        },
    )
