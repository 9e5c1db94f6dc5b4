"""The one step runner: every step has the poll's shape.

Under the operation's lease: ask the core what to do before any request; if it
says ``Send``, take a token from the provider's rate limiter (none left: the
step ends waiting, ``local_rate_limit``), commit the claim (counter and ``*_sent``
event) before the request leaves (invariants 1 and 3), check the deadline
again, send exactly that request, ask the core what the answer means, and
persist the plan in one fenced transaction. This module owns every commit of a step; decisions never
see a session and never read the clock.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from jobwarden.models.actions import (
    Accept,
    Decided,
    EscalationReason,
    Move,
    RequestPurpose,
    Send,
    escalate,
)
from jobwarden.models.cleanup import with_cleanup
from jobwarden.models.effects import plan, timed
from jobwarden.models.errors import LeaseNotAcquiredError, StaleVersionError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.pauses import held
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import snapshot, transaction
from jobwarden.models.plan import Plan
from jobwarden.models.provider.binding import decide_binding
from jobwarden.models.provider.rate_limits import granted, rate_limited
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.provider.signals import RawResponse
from jobwarden.models.states import AUTOMATION_STOPPED, TERMINAL, OperationState
from jobwarden.models.steps import StepKind, unsent
from jobwarden.tasks import faults
from jobwarden.tasks.leases import operation_lease
from jobwarden.tasks.provider import breaker
from jobwarden.tasks.provider.edge import (
    MAX_REQUESTS_PER_LEASE,
    secret_forms,
    shown_create_request,
)
from jobwarden.tasks.provider.rate_limits import take
from jobwarden.tasks.reservations import Reservation, unmarked
from jobwarden.tasks.results.collection import collector, stored_whole
from jobwarden.tasks.runtime import Runtime, utcnow

# A step sends one request, except reconciliation by lookup, which may follow an empty
# lookup with the same-token create. A decision asking for more is a bug, not a loop.
# The lease TTL is checked against this many requests at start-up (the edge's bound).
MAX_SENDS_PER_STEP = MAX_REQUESTS_PER_LEASE


def read(rt: Runtime, operation_id: uuid.UUID) -> Operation | None:
    """A fresh snapshot of one operation, read outside a step (nothing is fenced on it)."""
    with snapshot(rt.settings.database_url) as session:
        return store.load(session, operation_id)


def persist(
    rt: Runtime, session: Session | None, op: Operation, p: Plan, now: datetime
) -> Operation:
    """One fenced write; raises StaleVersionError when another owner wrote first.

    On the step's autocommit session the write is one statement and its own commit; a
    plan that stores a result also inserts its bytes, so it takes a transaction.
    """
    if session is None or p.result is not None:
        with transaction(rt.settings.database_url) as tx:
            return store.write(tx, op, p, now=now)
    return store.write(session, op, p, now=now)


def planned(  # noqa: PLR0913 - plan()'s own inputs, each named at every call
    rt: Runtime,
    op: Operation,
    decided: Decided,
    now: datetime,
    answer: RawResponse | None = None,
    *,
    actor: str | None = None,
) -> Plan:
    """``plan()`` with this runtime's settings; ``actor`` None: its worker actor."""
    return plan(
        op,
        decided,
        actor=actor or rt.actor,
        now=now,
        answer=answer,
        max_countdown=rt.settings.max_countdown_seconds,
        # Read per plan, not cached: a rotated credential is scrubbed from then on.
        secrets=secret_forms(rt.contract_for(op)) if answer is not None else (),
    )


def run(
    rt: Runtime,
    op: Operation,
    step: StepKind,
    session: Session | None = None,
    reservation: Reservation | None = None,
) -> tuple[Operation, datetime | None]:
    """Drive ``op`` through one step; returns the stored snapshot and the next wake-up.

    The invariants' order: decide before any request; count the request in a commit
    before it leaves and check its deadline again after (3); send it; decide what the
    answer means; write the decision fenced by the version read (4), its events chained
    (6). ``reservation``: the operation's, as the worker's step lease holds it (None: one
    that marked nothing); the status request it holds leaves with no claim commit.
    """
    started = time.monotonic()
    reservation = reservation or unmarked(rt, op.operation_id)
    # The contract the operation pinned (invariant 16): a dict lookup on a digest the
    # row already carries, so the poll pays nothing for it.
    ctx = rt.context_for(op)
    fault_scope = op.idempotency_key
    now = utcnow()
    # A pause covering the operation (its snapshot's hold) parks any request before it is
    # counted, rate-limited or sent; a decision needing none (a deadline) goes on.
    decided = held(op, step.before(op, ctx, now), now)
    answer: RawResponse | None = None
    for _ in range(MAX_SENDS_PER_STEP):
        send = decided.action
        if not isinstance(send, Send):
            break
        cleared = _cleared(rt, ctx, op, decided, send, now=now)
        if isinstance(cleared, Decided):
            decided = cleared  # nothing leaves, nothing is counted
            break
        stamped = replace(decided, action=cleared)
        row, leaving = _claimed(rt, session, reservation, op, stamped, answer=answer, now=now)
        faults.fault_point(rt.redis, rt.settings.key_prefix, step.claim_point, fault_scope)
        now = utcnow()
        late = unsent(row, send, now)
        if late is not None:
            # The claim stays as unused reserve, and the history says it was not sent.
            op, decided, answer = row, late, None
            break
        op = leaving
        answer = _sent(rt, ctx, op, send)
        faults.fault_point(rt.redis, rt.settings.key_prefix, step.response_point, fault_scope)
        now = utcnow()
        decided = step.after(op, ctx, send.request, answer, now, rt.jitter())
        # The provider's breaker counts the answer; while it is open a failure is the
        # incident's, not this operation's (no budget spent, nothing escalated).
        decided = breaker.observe(rt, ctx.contract, op, send.request, answer, decided)
    else:
        if isinstance(decided.action, Send):
            detail = f"{step.name} asked for more than {MAX_SENDS_PER_STEP} requests in one step"
            decided = Decided(action=escalate(op.state, EscalationReason.internal_error, detail))
    # A job that ended leaving resources cleans up before it ends ([cleanup]); judged on
    # the row as the request left it (a reserved poll has moved it to observing).
    decided = with_cleanup(op, ctx.contract, decided)
    decided = stored_whole(rt.result_store, op, decided)
    row, p = reservation.settle(op, planned(rt, op, decided, now, answer))
    if p.empty:
        return row, None
    op = persist(rt, session, row, timed(p, step.name, time.monotonic() - started), now)
    if isinstance(decided.action, Accept):
        faults.fault_point(rt.redis, rt.settings.key_prefix, "after_accept_commit", fault_scope)
    return op, p.next_at


def _cleared(  # noqa: PLR0913 - the runner's state before a request, each named at the one call
    rt: Runtime, ctx: StepContext, op: Operation, decided: Decided, send: Send, *, now: datetime
) -> Send | Decided:
    """``send`` cleared to leave, with the rate limiter's grant in its record; or the step's
    decision when it may not: not the create that was approved (invariant 13), or no token
    from the provider's shared rate limiter (the step waits, never sleeps). Before the
    claim, so a request held back costs neither a counted request nor a reservation."""
    unbound = _off_approval(ctx, op, send, now)
    if unbound is not None:
        return unbound
    starts = send.request.purpose is RequestPurpose.create and op.create_attempts == 0
    token = take(
        rt.redis,
        rt.settings.key_prefix,
        ctx.contract,
        tenant=op.tenant,
        priority=op.priority,
        create=starts,
    )
    if not token.granted:
        return rate_limited(decided, send, retry_after=token.retry_after, now=now)
    return granted(send, token.at)


def _claimed(  # noqa: PLR0913 - the runner's state at the claim, each named at the one call
    rt: Runtime,
    session: Session | None,
    reservation: Reservation,
    op: Operation,
    decided: Decided,
    *,
    answer: RawResponse | None,
    now: datetime,
) -> tuple[Operation, Operation]:
    """Count ``decided``'s request before it leaves (invariant 3): the row as stored after
    the count, and ``op`` as the request leaves it (what the answer is decided on).

    The status request the row reserved was counted by the commit that decided this poll:
    it leaves on that reservation, with no commit here, and its record rides on the
    answer's commit (the row stays as it was). Any other request is claimed, counter and
    ``*_sent`` event, in a fenced commit of its own (the answer to an earlier request of
    this step, a reconciliation's lookup, is recorded with it).
    """
    assert isinstance(decided.action, Send)
    leaving = reservation.spend(op, decided.action) if answer is None else None
    if leaving is not None:
        return op, leaving
    row, claim = reservation.settle(op, planned(rt, op, decided, now, answer))
    claimed = persist(rt, session, row, claim, now)
    return claimed, claimed


def _sent(rt: Runtime, ctx: StepContext, op: Operation, send: Send) -> RawResponse:
    """Send exactly ``send``'s request; a result streams into the result store as it is
    judged, never held whole."""
    downloads = (RequestPurpose.result, RequestPurpose.failed_items)
    collect = (
        collector(rt.result_store, op, ctx, send.request.purpose)
        if send.request.purpose in downloads and ctx.contract.result is not None
        else None
    )
    return rt.http.send(ctx.contract, send.request, trace_id=op.trace_id, collect=collect)


def _off_approval(ctx: StepContext, op: Operation, send: Send, now: datetime) -> Decided | None:
    """The create about to leave, rendered as its approval was shown and checked against
    the digest it bound (models/provider/binding.py); None when it may leave. Before the
    rate limiter and the claim, so a refused send costs no token and no counted attempt."""
    if send.request.purpose is not RequestPurpose.create or op.approved_request_digest is None:
        return None
    shown = shown_create_request(ctx, op, send.request)
    return decide_binding(
        op,
        request_digest=shown.digest,
        request_line=f"{shown.method} {shown.url}",
        now=now,
        window=timedelta(seconds=ctx.contract.limits.approval_window_seconds),
    )


# A step that raises is a bug or an answer nobody foresaw; retried without bound it would
# resend requests the counters already allow, forever. Counted per operation and committed,
# so a crash loop across workers and restarts still ends.
MAX_STEP_FAILURES = 3


def _stoppable(op: Operation) -> bool:
    return (
        op.state not in TERMINAL
        and op.state not in AUTOMATION_STOPPED
        and op.state is not OperationState.awaiting_approval
    )


def _automation_write(
    rt: Runtime, operation_id: uuid.UUID, decide: Callable[[Operation, datetime], Decided]
) -> OperationState | None:
    """A write of automation's own outside a step, only while automation drives ``op``.

    Returns the state reached; None when the lease is held (its owner meets the same
    condition) or there is no such operation. StaleVersionError passes.
    """
    try:
        written = under_lease(
            rt, operation_id, lambda op, now: decide(op, now) if _stoppable(op) else None
        )
    except LeaseNotAcquiredError:
        return None
    return written.stored.state if written is not None else None


def stop_automation(
    rt: Runtime, operation_id: uuid.UUID, reason: EscalationReason, detail: str
) -> OperationState | None:
    """Escalate from whatever active state the row is in; returns the state reached."""
    return _automation_write(
        rt, operation_id, lambda op, _: Decided(action=escalate(op.state, reason, detail))
    )


def record_step_failure(
    rt: Runtime, operation_id: uuid.UUID, step: StepKind, exc: BaseException
) -> OperationState | None:
    """Count a crashed step; the third one stops automation with ``internal_error``.

    The history names the exception class, never its message (it may hold provider
    bytes or a credential). Returns the state reached, None if another owner has it.
    """
    name = type(exc).__name__

    def count(op: Operation, now: datetime) -> Decided:
        failures = op.step_failures + 1
        if failures >= MAX_STEP_FAILURES:
            detail = f"the {step.name} step crashed {failures} times; last: {name}"
            action = escalate(op.state, EscalationReason.internal_error, detail)
            return Decided(action=action, changes={"step_failures": failures})
        cause = f"{step.name} step crashed ({name}); {failures} of {MAX_STEP_FAILURES}"
        in_flight = op.state is OperationState.create_pending and op.last_event_kind in (
            EventKind.create_sent,
            EventKind.reconcile_sent,
        )
        if in_flight:
            # The create may have left before the crash: only reconciliation may say.
            move = Move(
                to=OperationState.create_unknown,
                event=EventKind.create_ambiguous,
                cause=cause,
                wake_at=now,
            )
        else:
            move = Move(to=op.state, event=EventKind.decision, cause=cause, wake_at=op.next_poll_at)
        return Decided(action=move, changes={"step_failures": failures})

    return _automation_write(rt, operation_id, count)


@dataclass(frozen=True, slots=True, kw_only=True)
class Writer:
    """Who writes outside a step, and on what terms it waits for the lease.

    A worker's own write (a stop, a counted crash) never waits: a held lease means its
    owner is on it. A person's intervention waits for a step in flight to let go, so
    that step's observation is not lost, and then writes fenced even without the lease
    (``lease_required=False``): the row version still refuses to overwrite a newer
    write. A webhook delivery waits a little and otherwise is asked to deliver again.
    """

    actor: str | None = None  # None: this runtime's worker actor
    wait_seconds: float = 0.0
    lease_required: bool = True
    attempts: int = 1  # fenced races lost in a row before StaleVersionError passes
    # Added to every event the write records: a break-glass author's mark and reason.
    excerpt: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Written:
    """What one write outside a step found and left (``stored is found``: nothing written)."""

    found: Operation
    stored: Operation
    plan: Plan
    now: datetime


Decide = Callable[[Operation, datetime], Decided | None]
Alongside = Callable[[Session, Operation, datetime], None]


def under_lease(
    rt: Runtime,
    operation_id: uuid.UUID,
    decide: Decide,
    writer: Writer | None = None,
    alongside: Alongside | None = None,
) -> Written | None:
    """The one shape of a write outside a step: lease, reload, decide (pure), plan, persist.

    ``decide`` sees a fresh snapshot and the time and returns what ``plan()`` turns into
    changes and events (None: nothing to write); it may raise to refuse. ``alongside``
    writes in the same transaction before the fenced write (a webhook's dedup row) and
    may raise to abort both. Returns None when there is no such operation; raises
    LeaseNotAcquiredError when the writer needs the lease and its holder keeps it, and
    StaleVersionError when the fenced write lost ``writer.attempts`` races in a row.
    """
    terms = writer or Writer()
    for attempt in range(terms.attempts):
        try:
            with contextlib.ExitStack() as held, transaction(rt.settings.database_url) as tx:
                leased = _take_lease(rt, operation_id, terms, held)
                op = store.load(tx, operation_id)
                if op is None:
                    return None
                now = utcnow()
                decided = decide(op, now)
                if decided is None:
                    return Written(found=op, stored=op, plan=Plan(), now=now)
                p = planned(rt, op, decided, now, actor=terms.actor)
                if terms.excerpt:
                    p = _marked(p, terms.excerpt)
                if leased and ("state" in p.changes or "next_poll_at" in p.changes):
                    # Only the lease holder may return a reservation: without it a step
                    # may be about to send it. A plan that changes neither the state
                    # nor the timer cannot strand one (a webhook that only records).
                    _, p = unmarked(rt, operation_id).settle(op, p)
                if alongside is not None:
                    alongside(tx, op, now)
                stored = store.write(tx, op, p, now=now) if not p.empty else op
                return Written(found=op, stored=stored, plan=p, now=now)
        except StaleVersionError:
            if attempt == terms.attempts - 1:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover


def _marked(p: Plan, extra: Mapping[str, Any]) -> Plan:
    events = tuple(replace(e, excerpt={**(e.excerpt or {}), **extra}) for e in p.events)
    return replace(p, events=events)


def _take_lease(
    rt: Runtime, operation_id: uuid.UUID, terms: Writer, held: contextlib.ExitStack
) -> bool:
    """Enter the operation's lease on ``held``; False when it is not required and busy."""
    lease = operation_lease(
        rt.redis,
        rt.settings.key_prefix,
        operation_id,
        rt.settings.lease_ttl_seconds,
        wait_seconds=terms.wait_seconds,
    )
    try:
        held.enter_context(lease)
    except LeaseNotAcquiredError:
        if terms.lease_required:
            raise
        return False
    return True
