"""The intent a submission records: the operation as intake opens it, and its first event.

Pure: a checked submission, its contract, the concurrency key's occupancy, the time
and the facts the shell drew (the id, the fingerprint, the trace) in; the frozen
snapshot and its plan (the ``intent_recorded`` event, planned by ``plan()`` like any
other) out. The state it starts in is decided here and nowhere else
(``initial_state``). Intake inserts both with its intake-log entry in one statement
(``models/persistence/intake_store.insert``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, get_args, get_type_hints

from jobwarden.models.actions import Decided, Open
from jobwarden.models.concurrency import Occupancy, admits_now, key_limit
from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.effects import plan
from jobwarden.models.history.chain import GENESIS_HASH
from jobwarden.models.humans.approvals import window_end
from jobwarden.models.intake.follow_ups import Link
from jobwarden.models.intake.submission import Submission
from jobwarden.models.operation import COLUMNS, Operation
from jobwarden.models.plan import Plan
from jobwarden.models.polling.business_deadline import resolve
from jobwarden.models.provider.requests import provider_token
from jobwarden.models.states import OperationState as S


@dataclass(frozen=True, slots=True, kw_only=True)
class Intake:
    """What the shell fixed before the operation is opened: what the core cannot draw
    itself (an id, a trace id) and who is asking, one field per fact."""

    operation_id: uuid.UUID
    fingerprint: str
    trace_id: str
    actor: str  # the intent event's actor: the door's caller, else submitter:<requested_by>
    # The operation a person's resubmission replaces (None for every other submission).
    resubmit_of: uuid.UUID | None = None
    # The digest of the contract text it is created under (invariant 16); None only
    # where no text was read (a contract built in code, as unit tests do).
    contract_digest: str | None = None
    # The submission span's traceparent (tracing on), kept for the steps' spans
    # (jobwarden.observability.telemetry).
    traceparent: str | None = None
    # The principal a schedule submits for: named in the intent event, so that principal
    # can never approve it (models/humans/approvals.py).
    on_behalf_of: str | None = None
    # A break-glass submitter's reason, marked on the intent event as on every decision.
    break_glass: str | None = None
    # A follow-up's link to its parent (models/intake/follow_ups.py); None otherwise.
    follow_up: Link | None = None


def initial_state(contract: ProviderContract, occupancy: Occupancy | None) -> S:
    """The state a new operation starts in; ``occupancy`` is its concurrency key's (None
    when it names none).

    Queued when the key has no room (submission order first; an approval, if the
    contract demands one, comes when its turn does), else awaiting approval when the
    contract demands one, else create_pending.
    """
    if occupancy is not None and not admits_now(occupancy, key_limit(contract.concurrency)):
        return S.queued
    return S.awaiting_approval if contract.requires_approval else S.create_pending


def open_operation(
    sub: Submission,
    contract: ProviderContract,
    occupancy: Occupancy | None,
    now: datetime,
    *,
    intake: Intake,
) -> tuple[Operation, Plan]:
    """The operation as its intent row inserts it, and the plan recording its intent.

    ``occupancy``: the concurrency key's, read under its lock (None when the submission
    names no key). The snapshot's chain head is GENESIS: the insert chains the plan's
    event with the row's digest and sets the head (intake_store.insert).
    """
    op = _opened(sub, contract, initial_state(contract, occupancy), now, intake)
    return op, _intent(op, intake)


def _opened(
    sub: Submission, contract: ProviderContract, state: S, now: datetime, intake: Intake
) -> Operation:
    limits = contract.limits
    due = now if state is S.create_pending else None
    result_seconds = sub.result_deadline_seconds or limits.result_deadline_seconds
    business = resolve(sub.business_deadline, now)
    # Awaiting approval, the row's timer is the approval window's end (parked: the
    # sweeper wakes the step that ends the operation then, if nobody approved it).
    timer = due
    if state is S.awaiting_approval:
        timer = window_end(now, timedelta(seconds=limits.approval_window_seconds), business)
    # Only what intake decides is spelled here; every other column starts empty.
    decided: dict[str, Any] = dict(
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
        state=state,
        version=1,
        trace_id=intake.trace_id,
        requested_by=sub.requested_by,
        # Invariant 1 names who authorized the create: without an approval step the
        # submitter's request is the authority; with one, the approver fills this in.
        authorized_by=None if contract.requires_approval else sub.requested_by,
        created_at=now,
        create_deadline=now + timedelta(seconds=limits.create_deadline_seconds),
        result_deadline=now + timedelta(seconds=result_seconds),
        cancel_window_seconds=sub.cancel_deadline_seconds,
        next_poll_at=timer,
        dispatched_at=due,
        max_status_requests=sub.max_status_requests or limits.max_status_requests,
        max_transport_failures=sub.max_transport_failures or limits.max_transport_failures,
        # Not fingerprinted: "in 600 s" repeated a moment later is the same request.
        business_deadline=business,
        concurrency_key=sub.concurrency_key,
        priority=sub.priority,
        concurrency_limit=(
            key_limit(contract.concurrency) if sub.concurrency_key is not None else None
        ),
        resubmit_of=intake.resubmit_of,
        contract_digest=intake.contract_digest,
        follows=intake.follow_up.parent if intake.follow_up else None,
        follow_up_kind=intake.follow_up.kind if intake.follow_up else None,
        follow_up_amount=intake.follow_up.amount if intake.follow_up else None,
        last_event_hash=GENESIS_HASH,
        updated_at=now,
        state_since=now,
    )
    return Operation(**(_NOTHING_YET | decided))


def _empty(hint: Any) -> tuple[bool, Any]:
    """What a column holds before anything happened: None where it may, 0 for a count;
    (False, None) for a column that has no empty value (intake must decide it)."""
    if type(None) in get_args(hint):
        return True, None
    if hint is int:
        return True, 0
    return False, None


# The facts a new operation has not met yet (no remote job, no observation, zero
# counts), derived from the snapshot's own field types, so this module spells no column
# but those intake decides (tests/unit/test_operation_columns.py).
_NOTHING_YET: Final[dict[str, Any]] = {
    name: value
    for name, hint in get_type_hints(Operation).items()
    if name in COLUMNS
    for has_one, value in [_empty(hint)]
    if has_one
}


def _intent(op: Operation, intake: Intake) -> Plan:
    """The plan of a just-opened ``op``: its ``intent_recorded`` event, by ``plan()``."""
    excerpt: dict[str, Any] = {
        "fingerprint": op.request_fingerprint,
        "idempotency_key": op.idempotency_key,
        "source_event_id": op.source_event_id,
    }
    if op.concurrency_key is not None:
        excerpt["concurrency_key"] = op.concurrency_key
    if op.business_deadline is not None:
        excerpt["business_deadline"] = op.business_deadline.isoformat()
    if op.priority != 0:
        # Not a row fact (row_facts.UNBOUND_COLUMNS): the chain binds it here.
        excerpt["priority"] = op.priority
    if op.resubmit_of is not None:
        # Its history names the operation it replaces; that one's names it back.
        excerpt["resubmit_of"] = str(op.resubmit_of)
    if op.contract_digest is not None:
        # The chain proves which contract the operation was created under.
        excerpt["contract_digest"] = op.contract_digest
    if intake.traceparent is not None:
        excerpt["traceparent"] = intake.traceparent
    if intake.on_behalf_of is not None:
        excerpt["on_behalf_of"] = intake.on_behalf_of
    if intake.break_glass is not None:
        excerpt |= {"principal": "break-glass", "break_glass": intake.break_glass}
    link = intake.follow_up
    if link is not None:
        # The chain proves what it follows and as what; the parent's names it back.
        excerpt |= {"follows": str(link.parent), "follow_up_kind": link.kind}
        if link.amount is not None:
            excerpt |= {"amount": link.amount, "limit": link.limit, "limit_field": link.limit_field}
        if link.rule is not None:
            excerpt["started_by_rule"] = link.rule
    # queued: the wait for the concurrency key starts here (admitted ends it).
    cause = "queued behind the holders of its concurrency key" if op.state is S.queued else None
    return plan(
        op,
        Decided(action=Open(cause=cause, excerpt=excerpt)),
        actor=intake.actor,
        now=op.created_at,
        answer=None,
        max_countdown=0.0,
    )
