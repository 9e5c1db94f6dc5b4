"""A person's resubmission: the new operation's request, made from the one it replaces.

Pure. A resubmission is a business decision only a person takes after a known, final
failure (models/humans/escalation.py offers it). It is a *new* operation: a new id and so a
new provider token (never a re-send under the old token, which the provider would
answer with the old job), submitted through intake like any other, with its own
approval where the contract demands one. Its idempotency key is fixed by the old
operation, so a repeated or retried resubmission makes one replacement, not two.
"""

from __future__ import annotations

from jobwarden.models.intake.reserved_keys import RESUBMIT
from jobwarden.models.intake.submission import SubmissionRequest
from jobwarden.models.operation import Operation

# Reserved (models/intake/reserved_keys.py): no caller can plant the replacement's key.
KEY_PREFIX = RESUBMIT.prefix


def resubmit_key(op: Operation) -> str:
    """The replacement's idempotency key: one per replaced operation."""
    return f"{KEY_PREFIX}{op.operation_id}"


def resubmission(op: Operation, *, requested_by: str) -> SubmissionRequest:
    """The request that resubmits ``op``'s command, by ``requested_by`` (the person).

    Kept: the tenant, provider, command, method and route (so the fingerprint is the
    same request's), the concurrency key, the priority, the cancel window and the business deadline
    (the business's word, which no resubmission extends). Not kept: the source event id
    (one business event names one operation; the link names the old one instead) and
    the budgets a human may have raised on the old one (the new one starts at the
    contract's).
    """
    return SubmissionRequest(
        tenant=op.tenant,
        requested_by=requested_by,
        provider=op.provider,
        command=dict(op.command),
        idempotency_key=resubmit_key(op),
        cancel_deadline_seconds=op.cancel_window_seconds,
        concurrency_key=op.concurrency_key,
        business_deadline=op.business_deadline,
        priority=op.priority,
        method=op.method,
        route=op.route,
    )
