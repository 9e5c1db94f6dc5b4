"""The intent a submission records: the operation as intake inserts it, and its first event.

Pure: a checked submission, its contract and the facts intake fixed (the id, the
state it starts in, the fingerprint, the trace, the time) in; the frozen snapshot
and the ``intent_recorded`` event out, that event planned by ``plan()`` like any
other. Intake inserts both in one statement with its intake-log entry.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobwarden.models.actions import Decided, Open
from jobwarden.models.concurrency import key_limit
from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.effects import plan
from jobwarden.models.history.chain import GENESIS_HASH, EventDraft
from jobwarden.models.humans.approvals import window_end
from jobwarden.models.intake.submission import Submission
from jobwarden.models.operation import Operation
from jobwarden.models.polling.business_deadline import resolve
from jobwarden.models.provider.requests import provider_token
from jobwarden.models.states import OperationState as S


@dataclass(frozen=True, slots=True, kw_only=True)
class Intake:
    """What intake fixed before the intent is recorded, one field per fact."""

    operation_id: uuid.UUID
    state: S  # create_pending, awaiting_approval, or queued behind a concurrency key
    fingerprint: str
    trace_id: str
    now: datetime
    # The operation a person's resubmission replaces (None for every other submission).
    resubmit_of: uuid.UUID | None = None
    # The digest of the contract text it is created under (invariant 16); None only
    # where no text was read (a contract built in code, as unit tests do).
    contract_digest: str | None = None


def opening(sub: Submission, contract: ProviderContract, intake: Intake) -> Operation:
    """The operation as the intent row inserts it (its chain head is set by the insert)."""
    limits = contract.limits
    now, state = intake.now, intake.state
    due = now if state is S.create_pending else None
    result_seconds = sub.result_deadline_seconds or limits.result_deadline_seconds
    business = resolve(sub.business_deadline, now)
    # Awaiting approval, the row's timer is the approval window's end (parked: the
    # sweeper wakes the step that ends the operation then, if nobody approved it).
    timer = due
    if state is S.awaiting_approval:
        timer = window_end(now, timedelta(seconds=limits.approval_window_seconds), business)
    return Operation(
        operation_id=intake.operation_id,
        tenant=sub.tenant,
        provider=sub.provider,
        idempotency_key=sub.idempotency_key,
        source_event_id=sub.source_event_id,
        # Ours, generated with the row, never the caller's key and never regenerated.
        provider_token=provider_token(contract.create.token_format, intake.operation_id),
        request_fingerprint=intake.fingerprint,
        method=sub.method,
        route=sub.route,
        command=sub.command,
        remote_job_id=None,
        status_url=None,
        state=state,
        version=1,
        trace_id=intake.trace_id,
        requested_by=sub.requested_by,
        # Invariant 1 names who authorized the create: without an approval step the
        # submitter's request is the authority; with one, the approver fills this in.
        authorized_by=None if contract.requires_approval else sub.requested_by,
        approval_expires_at=None,
        created_at=now,
        accepted_at=None,
        create_deadline=now + timedelta(seconds=limits.create_deadline_seconds),
        result_deadline=now + timedelta(seconds=result_seconds),
        cancel_deadline=None,
        cancel_window_seconds=sub.cancel_deadline_seconds,
        next_poll_at=timer,
        dispatched_at=due,
        create_attempts=0,
        status_requests_used=0,
        max_status_requests=sub.max_status_requests or limits.max_status_requests,
        transport_failures_used=0,
        max_transport_failures=sub.max_transport_failures or limits.max_transport_failures,
        consecutive_rate_limited=0,
        poll_attempt=0,
        extensions_used=0,
        step_failures=0,
        poll_not_before=None,
        result_fetch_attempts=0,
        collect_deadline=None,
        first_sent_at=None,
        # Not fingerprinted: "in 600 s" repeated a moment later is the same request.
        business_deadline=business,
        concurrency_key=sub.concurrency_key,
        concurrency_limit=(
            key_limit(contract.concurrency) if sub.concurrency_key is not None else None
        ),
        resubmit_of=intake.resubmit_of,
        contract_digest=intake.contract_digest,
        last_remote_state=None,
        last_http_status=None,
        progress=None,
        escalation_reason=None,
        escalation_detail=None,
        cancel_requested_by=None,
        cancel_reason=None,
        result_reference=None,
        validation_summary=None,
        event_count=1,
        last_event_hash=GENESIS_HASH,
        updated_at=now,
        state_since=now,
    )


def intent_event(op: Operation, actor: str) -> EventDraft:
    """The ``intent_recorded`` event of a just-opened ``op``, planned by ``plan()``."""
    excerpt: dict[str, Any] = {
        "fingerprint": op.request_fingerprint,
        "idempotency_key": op.idempotency_key,
        "source_event_id": op.source_event_id,
    }
    if op.concurrency_key is not None:
        excerpt["concurrency_key"] = op.concurrency_key
    if op.business_deadline is not None:
        excerpt["business_deadline"] = op.business_deadline.isoformat()
    if op.resubmit_of is not None:
        # Its history names the operation it replaces; that one's names it back.
        excerpt["resubmit_of"] = str(op.resubmit_of)
    if op.contract_digest is not None:
        # The chain proves which contract the operation was created under.
        excerpt["contract_digest"] = op.contract_digest
    # queued: the wait for the concurrency key starts here (admitted ends it).
    cause = "queued behind the holders of its concurrency key" if op.state is S.queued else None
    opened = plan(
        op,
        Decided(action=Open(cause=cause, excerpt=excerpt)),
        actor=actor,
        now=op.created_at,
        answer=None,
        max_countdown=0.0,
    )
    return opened.events[0]
