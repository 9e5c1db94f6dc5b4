"""The reserved status request: reserved, spent, returned unused and folded, purely.

Invariant 3: every status request is counted in a commit before it can leave. A poll's
decision reserves the next one in its own commit, so that poll sends it without a claim
commit and records it with its answer. A reservation never sent stays counted (an unused
reservation, which the invariant accepts); one returned to the budget must be known unsent.

``plan()`` (``models/effects.py``) reserves and folds; the shell (``tasks/reservations.py``)
decides whether a reservation may be spent or returned, by the marker it keeps in Redis.
Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from jobwarden.models.actions import RequestPurpose, Send
from jobwarden.models.history.chain import EventDraft
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.states import POLLED
from jobwarden.models.states import OperationState as S

if TYPE_CHECKING:
    # effects.plan() calls this module; Plan is only named here, never built.
    from jobwarden.models.effects import Plan


def with_next_poll_reserved(op: Operation, p: Plan) -> Plan:
    """``p`` counting the next status request, when it leaves the operation waiting for a
    poll, so that poll sends without a claim commit of its own.

    One that never leaves (the operation moved on, or the step died) stays counted, an
    unused reservation.
    """
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


def reserved_send(op: Operation, send: Send) -> Send | None:
    """``send`` as the request the last decision reserved, or None when none may be spent.

    The reservation was counted by the commit that decided this poll, so sending it
    needs no claim commit: its record (the ordinal, a move to observing) rides on the
    commit that records the answer. The shell spends it only once per reservation (a
    marker it sets before the send), so a redelivered message never reuses one.
    """
    if send.request.purpose is not RequestPurpose.status or op.reserved_request is None:
        return None
    return replace(
        send,
        counters={},
        changes={"reserved_request": None},
        cause=None,
        excerpt={"request": op.reserved_request, "of": op.max_status_requests},
    )


def as_sent(op: Operation, send: Send) -> Operation:
    """The snapshot as the claim of ``send`` leaves it (counters, changes, the move)."""
    changes: RowChanges = {**send.counters, **send.changes}
    if send.move_to is not None and send.move_to is not op.state:
        changes["state"] = send.move_to
    return op.with_changes(changes) if changes else op


def folded_claim(claim: EventDraft, first: EventDraft) -> list[EventDraft]:
    """The claim a reserved request never committed, carried by the answer's first event.

    The ordinal joins the excerpt; a move the claim made (accepted -> observing) becomes
    the event's transition. An answer event with a transition of its own (a first poll
    that escalates) keeps the claim as an event before it instead.
    """
    if first.to_state is not None and claim.to_state is not None:
        return [claim, first]
    return [
        replace(
            first,
            from_state=claim.from_state if claim.to_state is not None else first.from_state,
            to_state=claim.to_state if claim.to_state is not None else first.to_state,
            excerpt={**(claim.excerpt or {}), **(first.excerpt or {})},
        )
    ]


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
