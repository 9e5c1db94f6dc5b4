"""The reserved status request, purely: reserved, spent, recorded with its answer, returned.

Invariant 3: every status request is counted in a commit before it can leave. A poll's
decision reserves the next one in its own commit, so that poll sends it without a claim
commit and records it with its answer. A reservation never sent stays counted (an unused
reservation, which the invariant accepts); one returned to the budget must be known unsent.

A step settles every plan it writes (``settled``): the claim of a reserved request that
left without a commit of its own is folded into the record of its answer, and a plan that
leaves the operation waiting for a poll reserves that poll's request. The shell
(``tasks/reservations.py``) decides whether a reservation may be spent or returned, by the
marker it keeps in Redis. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import replace

from jobwarden.models.actions import RequestPurpose, Send
from jobwarden.models.history.chain import EventDraft
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.plan import Plan
from jobwarden.models.states import POLLED
from jobwarden.models.states import OperationState as S


def reserved_send(op: Operation, send: Send) -> Send | None:
    """``send`` as the request the last decision reserved, or None when none may be spent.

    The reservation was counted by the commit that decided this poll, so sending it
    needs no claim commit: its record (the ordinal, a move to observing) rides on the
    commit that records the answer, and so does no timer of its own. What else the
    send's record says (the rate limiter's grant) is kept. The shell spends it only once
    per reservation (a marker it sets before the send), so a redelivered message never
    reuses one.
    """
    if send.request.purpose is not RequestPurpose.status or op.reserved_request is None:
        return None
    return replace(
        send,
        counters={},
        changes={"reserved_request": None},
        cause=None,
        wake_at=None,
        excerpt={**send.excerpt, "request": op.reserved_request, "of": op.max_status_requests},
    )


def as_sent(op: Operation, send: Send) -> Operation:
    """The snapshot as the claim of ``send`` leaves it (counters, changes, the move)."""
    changes = _claim_changes(op, send)
    return op.with_changes(changes) if changes else op


def settled(op: Operation, p: Plan, *, spent: Send | None = None) -> Plan:
    """``p`` as it is written over ``op``: with the record of ``spent``, the reserved request
    that left without a claim commit and whose answer ``p`` records, and reserving the next
    status request when ``p`` leaves ``op`` waiting for a poll.

    ``p`` was planned over ``as_sent(op, spent)``, the snapshot its decision saw.
    """
    if spent is not None:
        p = with_claim_folded(op, spent, p)
    return with_next_poll_reserved(op, p)


def with_claim_folded(op: Operation, spent: Send, p: Plan) -> Plan:
    """``p`` carrying the claim of ``spent``, which never committed on its own.

    The claim's changes ride on the same commit; its ordinal joins the excerpt of the
    answer's first event, and a move it made (accepted -> observing) becomes that event's
    transition. An answer event with a transition of its own (a first poll that
    escalates) keeps the claim as an event before it instead. Every answer is recorded in
    an event (``effects.plan``), so a plan without one here is a bug, and raises.
    """
    if not p.events:
        raise ValueError("the answer to a reserved request must be recorded in an event")
    first, *rest = p.events
    to = spent.move_to if spent.move_to is not None and spent.move_to is not op.state else None
    claim = EventDraft(
        kind=spent.event,
        actor=first.actor,
        at=first.at,
        from_state=op.state.value if to is not None else None,
        to_state=to.value if to is not None else None,
        cause=spent.cause,
        excerpt=dict(spent.excerpt),
    )
    return replace(
        p,
        changes={**_claim_changes(op, spent), **p.changes},
        events=(*_folded(claim, first), *rest),
    )


def with_next_poll_reserved(op: Operation, p: Plan) -> Plan:
    """``p`` counting the next status request, when it decides to wait and leaves the
    operation waiting for a poll, so that poll sends without a claim commit of its own.

    One that never leaves (the operation moved on, or the step died) stays counted, an
    unused reservation.
    """
    if not p.waits:
        return p
    state = S(p.changes.get("state", op.state))
    used = p.changes.get("status_requests_used", op.status_requests_used)
    reserved = p.changes.get("reserved_request", op.reserved_request)
    if state not in POLLED or p.next_at is None or reserved is not None:
        return p
    if used >= op.max_status_requests or not p.events:
        return p  # the budget's last request is spent: the next poll's guard escalates
    # Said in the history, so a reservation never spent (its step died) is still explained.
    *earlier, last = p.events
    told = replace(last, excerpt={**(last.excerpt or {}), "reserved_request": used + 1})
    return replace(
        p,
        changes={**p.changes, "status_requests_used": used + 1, "reserved_request": used + 1},
        events=(*earlier, told),
    )


def unused_reservation(op: Operation, p: Plan) -> int | None:
    """The reservation ``p`` leaves behind unused, if it would: the plan takes the
    operation out of polling (or ends its timer) without spending or replacing it.

    The shell returns it (``with_reservation_returned``) unless an earlier attempt may
    have sent it.
    """
    if op.reserved_request is None or p.empty or "reserved_request" in p.changes:
        return None
    state = S(p.changes.get("state", op.state))
    return op.reserved_request if state not in POLLED or p.next_at is None else None


def with_reservation_returned(op: Operation, p: Plan) -> Plan:
    """``p`` with the unused reservation returned to the budget, so x of N counts sends."""
    used = p.changes.get("status_requests_used", op.status_requests_used)
    return replace(
        p, changes={**p.changes, "status_requests_used": used - 1, "reserved_request": None}
    )


def _claim_changes(op: Operation, send: Send) -> RowChanges:
    changes: RowChanges = {**send.counters, **send.changes}
    if send.move_to is not None and send.move_to is not op.state:
        changes["state"] = send.move_to
    return changes


def _folded(claim: EventDraft, first: EventDraft) -> tuple[EventDraft, ...]:
    if first.to_state is not None and claim.to_state is not None:
        return (claim, first)
    folded = replace(
        first,
        from_state=claim.from_state if claim.to_state is not None else first.from_state,
        to_state=claim.to_state if claim.to_state is not None else first.to_state,
        excerpt={**(claim.excerpt or {}), **(first.excerpt or {})},
    )
    return (folded,)
