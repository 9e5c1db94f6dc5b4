"""Pauses: nothing is sent for a provider (all of it, or one tenant's share) or one operation
until a person resumes it (issue 39; DESIGN "Incidents").

A pause is a recorded decision with an author and a reason (a rule such as a provider
breaker adds the ``evidence`` it saw). While one covers an operation, the snapshot carries
it as its ``hold`` and ``held`` turns every decision to send (create, lookup, status read,
cancel, result fetch, cleanup) into parking: a ``paused`` event, ``held_by`` set, the
timer moved to the next deadline (or none), no counter, no budget, no rate-limit token,
no request. A decision that needs no request (a deadline passed, a stop) still happens,
so deadlines keep running. ``resumed`` wakes each operation a pause parked at a time the
provider's rate limit spreads (``resume_time``), so a resume is never a burst. Pure.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from jobwarden.models.actions import Decided, NotYet, Record, RequestPurpose, Send
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.escalation import EXTEND_BY, EXTEND_CHECKS, MAX_EXTENSIONS
from jobwarden.models.humans.holds import Hold
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.states import OperationState as S

# A pause's reason is stored in events, logs and notifications: bounded like a cancel's.
MAX_REASON = 500
# Resumed operations wake at most this many per second when the contract sets no rate.
DEFAULT_RESUME_RATE = 10.0
# The share of the provider's rate a resume wakes operations at. Each woken operation's
# follow-ups (its next poll, its result fetch) need tokens too, and they rank ahead of
# what the resume wakes; waking at the full rate left them none, so each one displaced a
# woken request and every displaced request was a recorded refusal: 5,476 refusals for
# 1,940 requests in test_breaker's recovery, 4,184 at half the rate (and it ends sooner:
# the limiter, not the wake-ups, sets the pace once the follow-ups start).
RESUME_SHARE = 0.5
# The states whose step may send a request: the only ones a pause parks. Queued and
# awaiting-approval operations send nothing until they move into one of these.
SENDING: frozenset[S] = frozenset(
    {
        S.create_pending,
        S.create_unknown,
        S.reconciling,
        S.accepted,
        S.observing,
        S.cancel_requested,
        S.cancelling,
        S.result_collecting,
        S.cleanup_pending,
        S.cleaning_up,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """An automatic author of a pause (a provider breaker): recorded as ``rule:<name>``,
    with the evidence it saw on the pause row; never a person, so never an approver."""

    name: str

    @property
    def actor(self) -> str:
        return f"rule:{self.name}"


class PauseScope(StrEnum):
    provider = "provider"  # every operation at a provider (or one tenant's, with ``tenant``)
    operation = "operation"  # one operation


@dataclass(frozen=True, slots=True, kw_only=True)
class Pause:
    """One row of the pauses table, as read."""

    pause_id: uuid.UUID
    provider: str
    tenant: str | None  # None: every tenant's operations at the provider
    operation_id: uuid.UUID | None  # set: this one operation
    reason: str
    evidence: Mapping[str, Any] | None
    author: str
    author_kind: str
    started_at: datetime
    resumed_at: datetime | None = None
    resumed_by: str | None = None
    resume_note: str | None = None

    @property
    def scope(self) -> PauseScope:
        return PauseScope.operation if self.operation_id is not None else PauseScope.provider

    @property
    def active(self) -> bool:
        return self.resumed_at is None

    def as_hold(self) -> Hold:
        return Hold(
            pause_id=self.pause_id,
            author=self.author,
            reason=self.reason,
            started_at=self.started_at,
        )

    def covers(self, op: Operation) -> bool:
        """Whether this pause's scope holds ``op`` (the load query's rule, in Python)."""
        if self.operation_id is not None:
            return op.operation_id == self.operation_id
        return op.provider == self.provider and self.tenant in (None, op.tenant)


def checked_reason(reason: str, field: str = "reason") -> str:
    """The reason as stored; RefusedInputError naming ``field`` when it is empty or unbounded."""
    text = reason.strip()
    if not text or len(text) > MAX_REASON or not text.isprintable():
        raise RefusedInputError(f"{field}: say why, 1 to {MAX_REASON} printable characters")
    return text


def park_timer(op: Operation, now: datetime) -> datetime | None:
    """When a parked operation must be looked at again although paused: its next deadline.

    Deadlines keep running during a pause; at this time the step decides again, and a
    deadline that passed is handled as always, with no request. None: none lies ahead
    (the resume wakes it).
    """
    ahead = [
        d
        for d in (
            op.create_deadline if op.state in (S.create_pending, S.create_unknown) else None,
            op.create_deadline if op.state is S.reconciling else None,
            op.result_deadline,
            op.business_deadline,
            op.cancel_deadline,
            op.collect_deadline,
            op.cleanup_deadline,
        )
        if d is not None and d > now
    ]
    return min(ahead) if ahead else None


def _parked(
    op: Operation,
    hold: Hold,
    now: datetime,
    held_back: str | None,
    bounds: RowChanges | None = None,
) -> Decided:
    """The parking write: the ``paused`` event, ``held_by`` and the deadline timer
    (``bounds``: the extend option the person pausing chose, in the same write)."""
    cause = f"paused by {hold.author}: {hold.reason}"
    excerpt: dict[str, Any] = {"pause_id": str(hold.pause_id), "paused_by": hold.author}
    if held_back is not None:
        cause = f"{cause} ({held_back} not sent)"
        excerpt["held_back"] = held_back
    if bounds:
        excerpt["new_bounds"] = shown_bounds(bounds)
    # The timer is the next deadline as it stands after the extension, if there is one.
    at = park_timer(op.with_changes(bounds) if bounds else op, now)
    excerpt["next_poll_at"] = at.isoformat() if at is not None else None
    changes: RowChanges = {
        **(bounds or {}),
        "held_by": hold.pause_id,
        "next_poll_at": at,
        "dispatched_at": None,
    }
    return Decided(
        action=Record(event=EventKind.paused, cause=cause, excerpt=excerpt), changes=changes
    )


def may_send_during_pause(op: Operation, send: Send) -> bool:
    """A cancel a person allowed to leave during the pause: cancelling stops damage."""
    return send.request.purpose is RequestPurpose.cancel and op.cancel_during_pause_by is not None


def held(op: Operation, decided: Decided, now: datetime) -> Decided:
    """The planner's hold check, before any request: ``decided`` itself, or parked.

    Only a ``Send`` is held back: what needs no request (a deadline passed, a stop, an
    early wake-up) is decided as always. An operation already parked by the same pause
    and not yet due writes nothing (a duplicated or early message).
    """
    hold = op.hold
    if hold is None or not isinstance(decided.action, Send):
        return decided
    if may_send_during_pause(op, decided.action):
        return decided
    if hold.probe == op.operation_id:
        # A provider breaker's half-open probe: this one operation tests the provider.
        return decided
    if op.held_by == hold.pause_id and (op.next_poll_at is None or now < op.next_poll_at):
        return Decided(action=NotYet(until=None))
    return _parked(op, hold, now, decided.action.request.purpose.value)


def park(op: Operation, hold: Hold, now: datetime, *, extend: bool = False) -> Decided | None:
    """A pause's own write to an operation it covers (the pause command parks each one at
    once, so nothing in flight outlives it); None when there is nothing to park.

    A cancel a person allowed during the pause is left to leave. ``extend``: the person
    pausing also gives it the bounded extend option (once per operation, as at a resume),
    also when its own step parked it first, as the pause landed.
    """
    if op.state not in SENDING:
        return None
    if op.state is S.cancel_requested and op.cancel_during_pause_by is not None:
        return None
    bounds = extension(op, now) if extend else {}
    if op.held_by == hold.pause_id and not bounds:
        return None
    return _parked(op, hold, now, None, bounds)


def shown_bounds(bounds: RowChanges) -> dict[str, Any]:
    """The new bounds in the event, as an escalation's extend records them."""
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in bounds.items()}


def extension(op: Operation, now: datetime) -> RowChanges:
    """The bounded ``extend`` option (models/humans/escalation.py), for a person resuming:
    +EXTEND_BY on the result deadline, +EXTEND_CHECKS status requests, once per operation
    (the same ``extensions_used`` the escalation's option counts). Nothing for one that
    used it, or is not observing a remote job; the business deadline is never moved."""
    if op.state not in (S.accepted, S.observing) or op.extensions_used >= MAX_EXTENSIONS:
        return {}
    return {
        "result_deadline": max(op.result_deadline, now) + EXTEND_BY,
        "max_status_requests": op.max_status_requests + EXTEND_CHECKS,
        "extensions_used": op.extensions_used + 1,
    }


def resumed(  # noqa: PLR0913 - the resume's facts, each named at the one call
    op: Operation,
    pause_id: uuid.UUID,
    *,
    at: datetime,
    resumed_by: str,
    now: datetime,
    extend: bool = False,
) -> Decided | None:
    """The resume's write to one operation ``pause_id`` parked: woken at ``at``.

    Still covered by another active pause: parked under that one instead. No longer in a
    state that sends (a deadline ended it while paused): only ``held_by`` is cleared.
    None when this pause did not park it.
    """
    if op.held_by != pause_id:
        return None
    if op.hold is not None and op.hold.pause_id != pause_id:
        return _parked(op, op.hold, now, None)
    excerpt: dict[str, Any] = {"pause_id": str(pause_id), "resumed_by": resumed_by}
    if op.state not in SENDING:
        record = Record(event=EventKind.resumed, cause=f"resumed by {resumed_by}", excerpt=excerpt)
        return Decided(action=record, changes={"held_by": None})
    # Never before the provider's own Retry-After (invariant 3), which the step honours too.
    wake = max(at, op.poll_not_before) if op.poll_not_before is not None else at
    excerpt["next_poll_at"] = wake.isoformat()
    bounds = extension(op, now) if extend else {}
    if bounds:
        excerpt["new_bounds"] = shown_bounds(bounds)
    record = Record(
        event=EventKind.resumed,
        cause=f"resumed by {resumed_by}; the next request spread by the provider's rate",
        excerpt=excerpt,
    )
    # The sweeper relays the timer in batches (no countdown message each): a resume of
    # ten thousand operations is not ten thousand messages at once.
    changes: RowChanges = {
        **bounds,
        "held_by": None,
        "next_poll_at": wake,
        "dispatched_at": None,
    }
    return Decided(action=record, changes=changes)


def resume_time(index: int, *, now: datetime, rate: float | None, u: float) -> datetime:
    """When the ``index``-th operation a resume wakes is due: ``(index + u) / (rate *
    RESUME_SHARE)`` seconds from ``now``, ``u`` a draw in [0, 1) (jitter). So no more than
    about half the ``rate`` wake in any second, never a burst, and the rest of the rate is
    left to their follow-ups; ``rate`` None (the contract sets none, no limiter to share):
    DEFAULT_RESUME_RATE.
    """
    per_second = rate * RESUME_SHARE if rate is not None and rate > 0 else DEFAULT_RESUME_RATE
    return now + timedelta(seconds=(index + min(max(u, 0.0), 1.0)) / per_second)
