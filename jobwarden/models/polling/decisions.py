"""The poll's decision tables: what a status answer means, and the wait before a request.

Part of the decision core, whose every step's decisions are in ``models/steps.py``
(which calls these for the poll), ``create_decisions`` and ``result_decisions``. Pure
functions of a ``PollView`` (the row's bounds and counters), the
contract's ``PollPolicy``, a classified ``HttpSignal`` / ``StatusReading``,
the time ``now`` and a random draw ``u`` in [0, 1]. The Celery shell persists
the returned counters and action; it never second-guesses them. All datetimes
must be timezone-aware.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from jobwarden.models.actions import (
    Collect,
    DelaySource,
    Escalate,
    EscalationReason,
    Finish,
    NotYet,
    Wait,
    escalate,
)
from jobwarden.models.contracts.contract import PollPolicy, ProviderContract, RemoteStatus
from jobwarden.models.history.chain import EventKind
from jobwarden.models.history.excerpts import storable
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.polling.backoff import backoff_delay
from jobwarden.models.polling.business_deadline import earlier
from jobwarden.models.polling.estimates import (
    FinishEstimate,
    agreement,
    aim,
    estimate_finish,
    recent_finish,
)
from jobwarden.models.provider.signals import HttpSignal, SignalKind, StatusReading
from jobwarden.models.states import OperationState

__all__ = [
    "Collect",
    "Decision",
    "DelaySource",
    "Escalate",
    "EscalationReason",
    "Finish",
    "NotYet",
    "Phase",
    "PollView",
    "Wait",
    "action_for_reading",
    "aimed_wait",
    "decide_after_status",
    "decide_status_answer",
    "finish_estimate",
    "first_poll",
    "guard_before_status_request",
    "poll_view",
    "retry_wait",
    "wait_within",
]


# Failures (a create, lookup or download to repeat, a failed status read, a 429) keep
# doubling: they wait for the provider to recover, and the contract's growth factor
# exists to find finished jobs soon, not to retry a failing provider sooner.
RETRY_GROWTH = 2.0


class Phase(StrEnum):
    observing = "observing"  # waiting for the remote job to end
    cancelling = "cancelling"  # waiting for the provider to confirm a cancel


@dataclass(frozen=True, slots=True, kw_only=True)
class PollView:
    """The row's bounds and counters, as the decision core needs them."""

    phase: Phase
    deadline: datetime  # result deadline when observing, cancel deadline when cancelling
    accepted_at: datetime
    status_requests_used: int  # already includes the request just answered
    max_status_requests: int
    transport_failures_used: int
    max_transport_failures: int
    consecutive_rate_limited: int
    poll_attempt: int  # waits after status answers so far; the backoff attempt
    next_poll_at: datetime | None
    # The deadline is the business deadline, which came before the result deadline.
    deadline_is_business: bool = False
    # What the previous reading said: its progress and the finish it implied (0027).
    progress: float | None = None
    estimated_finish: datetime | None = None


def poll_view(op: Operation, *, accepted_at: datetime | None = None) -> PollView:
    """The one way to see an operation as the poll decisions do."""
    cancelling = op.state in (OperationState.cancelling, OperationState.cancel_requested)
    deadline = op.cancel_deadline if cancelling and op.cancel_deadline else op.result_deadline
    # A cancel is what the business may still want past its deadline: only observing stops.
    bound = earlier(deadline, None if cancelling else op.business_deadline)
    return PollView(
        phase=Phase.cancelling if cancelling else Phase.observing,
        deadline=bound,
        deadline_is_business=bound != deadline,
        accepted_at=accepted_at or op.accepted_at or op.created_at,
        # A reserved request is counted but not yet spent: the budget still holds it.
        status_requests_used=op.status_requests_used - (op.reserved_request is not None),
        max_status_requests=op.max_status_requests,
        transport_failures_used=op.transport_failures_used,
        max_transport_failures=op.max_transport_failures,
        consecutive_rate_limited=op.consecutive_rate_limited,
        poll_attempt=op.poll_attempt,
        next_poll_at=None if accepted_at else op.next_poll_at,
        progress=op.progress,
        estimated_finish=op.estimated_finish,
    )


PollAction = Wait | Collect | Finish | Escalate | NotYet


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """An action plus the counters the shell must persist with it."""

    action: PollAction
    transport_failures_used: int  # never reset: a budget, not a streak
    consecutive_rate_limited: int  # reset by any answer that is not a 429
    poll_attempt: int  # +1 on each wait after a status answer


def _escalate(phase: Phase, reason: EscalationReason, detail: str) -> Escalate:
    state = OperationState.cancelling if phase is Phase.cancelling else OperationState.observing
    return escalate(state, reason, detail)


def _deadline_passed(view: PollView) -> Escalate:
    if view.phase is Phase.cancelling:
        return _escalate(
            view.phase, EscalationReason.cancellation_unconfirmed, "cancel deadline passed"
        )
    which = "business" if view.deadline_is_business else "result"
    return _escalate(view.phase, EscalationReason.deadline_exceeded, f"{which} deadline passed")


def _budget_spent(view: PollView) -> Escalate:
    detail = f"request_budget_exhausted: {view.status_requests_used}/{view.max_status_requests}"
    if view.phase is Phase.cancelling:
        return _escalate(view.phase, EscalationReason.cancellation_unconfirmed, detail)
    return _escalate(view.phase, EscalationReason.request_budget_exhausted, detail)


def guard_before_status_request(view: PollView, *, now: datetime) -> PollAction | None:
    """Checked before every status request; None means the request may go out.

    Order: deadline first (a long sleep must not buy one more request), then an
    early wake-up (``NotYet``), then the request budget. The shell increments
    and commits ``status_requests_used`` before sending.
    """
    if now >= view.deadline:
        return _deadline_passed(view)
    if view.next_poll_at is not None and now < view.next_poll_at:
        return NotYet(until=view.next_poll_at)
    if view.status_requests_used >= view.max_status_requests:
        return _budget_spent(view)
    return None


def wait_within(
    *, now: datetime, seconds: float, deadline: datetime, source: DelaySource, cause: str = "wait"
) -> Wait:
    """Every wait, clipped to its deadline; the one place a delay becomes a time."""
    # Compare in seconds first: a huge Retry-After would overflow timedelta.
    remaining = max(0.0, (deadline - now).total_seconds())
    if seconds > remaining:
        return Wait(
            until=deadline,
            delay_seconds=remaining,
            delay_source=source,
            clipped_to_deadline=True,
            cause=cause,
        )
    until = min(now + timedelta(seconds=seconds), deadline)
    return Wait(
        until=until,
        delay_seconds=seconds,
        delay_source=source,
        clipped_to_deadline=False,
        cause=cause,
    )


def retry_wait(
    retry_after: float | None,
    policy: PollPolicy,
    *,
    attempt: int,
    u: float,
    now: datetime,
    deadline: datetime,
    cause: str = "wait",
) -> Wait:
    """Wait for the provider's Retry-After when it sent one, else jittered backoff.

    The one choice of delay for a request to repeat (a create, a lookup, a download);
    clipped to ``deadline`` before any arithmetic, so no hint can overflow or widen it.
    """
    if retry_after is not None:
        seconds, source = retry_after, DelaySource.provider_retry_after
    else:
        seconds = backoff_delay(
            attempt=attempt,
            base=policy.base_seconds,
            maximum=policy.max_seconds,
            jitter_floor=policy.jitter_floor,
            u=u,
            growth=RETRY_GROWTH,
        )
        source = DelaySource.local_backoff
    return wait_within(now=now, seconds=seconds, deadline=deadline, source=source, cause=cause)


def _wait_for(view: PollView, *, now: datetime, seconds: float, source: DelaySource) -> Wait:
    return wait_within(now=now, seconds=seconds, deadline=view.deadline, source=source)


def first_poll(
    view: PollView,
    policy: PollPolicy,
    *,
    now: datetime,
    retry_after: float | None = None,
    poll_hint: float | None = None,
) -> Wait:
    """Wait before the first status request: the contract's initial delay, or longer.

    The create (or reconcile) answer's Retry-After, else its poll hint, sets the first
    poll when it asks for more (Azure puts Retry-After on the 202 for exactly this);
    raised to the hint floor, never shortened. Clipped to the deadline like every
    wait; a deadline already passed gives a zero wait, and the guard then escalates.
    """
    seconds, source = policy.initial_delay_seconds, DelaySource.initial_delay
    asked = retry_after if retry_after is not None else poll_hint
    if asked is not None:
        asked = max(asked, policy.hint_floor_seconds)
        if asked > seconds:
            seconds = asked
            source = (
                DelaySource.provider_retry_after
                if retry_after is not None
                else DelaySource.provider_poll_hint
            )
    return wait_within(
        now=now, seconds=seconds, deadline=view.deadline, source=source, cause="first_poll"
    )


def finish_estimate(
    view: PollView, reading: StatusReading | None, *, now: datetime
) -> FinishEstimate | None:
    """The finish this reading implies while observing (kept on the row for the next)."""
    if view.phase is not Phase.observing or reading is None:
        return None
    return estimate_finish(
        progress=reading.progress,
        started_at=reading.started_at,
        eta=reading.eta,
        accepted_at=view.accepted_at,
        now=now,
    )


def aimed_wait(
    view: PollView, policy: PollPolicy, reading: StatusReading | None, *, now: datetime
) -> tuple[float, FinishEstimate] | None:
    """Seconds until just past the finish two agreeing readings imply, or None.

    Only while observing, and only when this reading's estimate confirms the previous
    one's (``estimates.agreement``): then the wait goes beyond the backoff's ceiling,
    the whole way to the finish, so a job with a steady pace costs a handful of
    requests. Raised to the contract's floor (``max(hint_floor_seconds, jitter_floor x
    base_seconds)``), so polls aimed too early never come in a burst; the caller clips
    it to the deadline and never uses it in place of a provider's delay.
    """
    current = finish_estimate(view, reading, now=now)
    if current is None or reading is None:
        return None
    broken = agreement(
        current,
        previous_finish=view.estimated_finish,
        previous_progress=view.progress,
        progress=reading.progress,
        step=reading.progress_step,
    )
    if broken is not None:
        return None
    floor = max(policy.hint_floor_seconds, policy.jitter_floor * policy.base_seconds)
    recent = None
    if not current.from_eta and reading.progress is not None and view.estimated_finish:
        recent = recent_finish(current, view.estimated_finish, view.progress, reading.progress)
    target = aim(current, recent=recent, expires_at=reading.expires_at)
    if recent is not None and recent < current.finish:
        current = replace(current, finish=recent)  # the finish aimed at, as recorded
    return max(floor, (target - now).total_seconds()), current


def pending_maximum(view: PollView, policy: PollPolicy, *, now: datetime) -> float:
    """``max_seconds``; while observing also ``(growth_factor - 1)`` x the job's age
    (never below ``base_seconds``), so a job that finishes just after a poll is found
    at most that share of its age late. The growth per attempt alone only approximates
    this: its first steps are long next to a young job's age.
    """
    if view.phase is not Phase.observing:
        return policy.max_seconds
    age = max(0.0, (now - view.accepted_at).total_seconds())
    return min(policy.max_seconds, max(policy.base_seconds, (policy.growth_factor - 1) * age))


def _next_wait(
    view: PollView,
    policy: PollPolicy,
    signal: HttpSignal,
    reading: StatusReading | None,
    *,
    now: datetime,
    u: float,
    rate_limited: int,
) -> PollAction:
    """A wait, or an escalation when no further request could be sent anyway."""
    if view.status_requests_used >= view.max_status_requests:
        return _budget_spent(view)
    if now >= view.deadline:
        return _deadline_passed(view)
    retry_after = signal.retry_after.seconds if signal.retry_after.valid else None
    hint = reading.poll_hint.seconds if reading is not None and reading.poll_hint.valid else None
    if (
        retry_after is None
        and reading is not None
        and reading.poll_hint.problem == "beyond_deadline"
    ):
        # The provider asks us not to look before the deadline: no legal poll remains.
        return _wait_for(
            view,
            now=now,
            seconds=(view.deadline - now).total_seconds(),
            source=DelaySource.provider_poll_hint,
        )
    # Invariant 3: never poll before the provider asked, so floors apply and caps do not.
    # A provider's delay also wins over a progress estimate: only a wait whose source is
    # the provider is remembered past an early wake-up (poll_not_before, models/effects),
    # so an estimate that lengthened it would let a person's wake-up poll too soon.
    if retry_after is not None:
        seconds = max(retry_after, policy.hint_floor_seconds)
        source = DelaySource.provider_retry_after
    elif hint is not None:
        seconds = max(hint, policy.hint_floor_seconds)
        source = DelaySource.provider_poll_hint
    elif rate_limited > 0:
        # A 429 without Retry-After: back off hard, from the rate-limit base.
        seconds = backoff_delay(
            attempt=rate_limited - 1,
            base=policy.rate_limit_base_seconds,
            maximum=max(policy.max_seconds, policy.rate_limit_base_seconds),
            jitter_floor=policy.jitter_floor,
            u=u,
            growth=RETRY_GROWTH,
        )
        source = DelaySource.local_backoff
    else:
        # A pending answer grows by the contract's factor; a failed read doubles.
        pending = reading is not None
        seconds = backoff_delay(
            attempt=view.poll_attempt,
            base=policy.base_seconds,
            maximum=pending_maximum(view, policy, now=now) if pending else policy.max_seconds,
            jitter_floor=policy.jitter_floor,
            u=u,
            growth=policy.growth_factor if pending else RETRY_GROWTH,
        )
        source = DelaySource.local_backoff
    if source is DelaySource.local_backoff and rate_limited == 0:
        aimed = aimed_wait(view, policy, reading, now=now)
        if aimed is not None:
            seconds, estimate = aimed
            source = (
                DelaySource.provider_eta if estimate.from_eta else DelaySource.progress_estimate
            )
            wait = _wait_for(view, now=now, seconds=seconds, source=source)
            return replace(wait, estimated_finish=estimate.finish, evidence=estimate.evidence())
    return _wait_for(view, now=now, seconds=seconds, source=source)


def action_for_reading(view: PollView, reading: StatusReading) -> PollAction | None:
    """The action a readable status implies, or None for "still pending: wait"."""
    phase = view.phase
    if reading.contradiction is not None:
        return _escalate(phase, EscalationReason.contract_violation, reading.contradiction)
    status = reading.remote_status
    if status is RemoteStatus.pending:
        return None
    if status is RemoteStatus.succeeded:
        # In cancelling too: the job crossed its commit point and ends as it really ended.
        return Collect(result_ref=reading.result_ref)
    if status is RemoteStatus.failed:
        return Finish(state=OperationState.failed, reason="remote_failed")
    if status is RemoteStatus.expired:
        return Finish(state=OperationState.expired, reason="remote_expired")
    if status is RemoteStatus.cancelled:
        return Finish(
            state=OperationState.cancelled,
            reason="remote_cancelled",
            event=EventKind.cancel_confirmed,
        )
    return _escalate(phase, EscalationReason.unknown_state, f"raw_state={reading.raw_state!r}")


def decide_after_status(
    view: PollView,
    policy: PollPolicy,
    signal: HttpSignal,
    reading: StatusReading | None,
    *,
    now: datetime,
    u: float,
    not_found_allowed: bool,
) -> Decision:
    """Decide what follows one status answer. Never raises on provider input.

    ``reading`` is given when the signal is ok/accepted with a parsed body; an
    ok/accepted signal without one counts as a malformed answer. Transport
    failures, 5xx and malformed answers spend the transport budget (a failed
    read is not a failed job); 401/403 and other 4xx escalate at once; 429s
    escalate after ``policy.max_rate_limited`` in a row. Every wait honours
    Retry-After, then a poll hint, then local backoff; progress or a provider ETA that
    two readings agree on replaces the backoff (never a provider's delay) with the wait
    until just past the estimated finish. Every wait is clipped to the deadline; when
    no request is left in the budget it escalates instead.
    """
    failures = view.transport_failures_used
    rate_limited = 0
    attempt = view.poll_attempt
    kind = signal.kind
    code = signal.status_code
    action: PollAction | None = None

    if kind in (SignalKind.unauthorized, SignalKind.forbidden):
        action = _escalate(view.phase, EscalationReason.authorization_denied, f"http_{code}")
    elif kind is SignalKind.rate_limited:
        rate_limited = view.consecutive_rate_limited + 1
        if rate_limited >= policy.max_rate_limited:
            action = _escalate(
                view.phase, EscalationReason.rate_limited, f"{rate_limited} consecutive 429s"
            )
    elif kind is SignalKind.not_found:
        if not not_found_allowed:
            action = _escalate(view.phase, EscalationReason.unknown_state, "not_found")
    elif kind in (SignalKind.conflict, SignalKind.gone, SignalKind.client_error):
        action = _escalate(view.phase, EscalationReason.provider_failure, f"http_{code}")
    elif kind in (SignalKind.ok, SignalKind.accepted) and reading is not None:
        action = action_for_reading(view, reading)
    else:
        # server_error, transport, malformed, or a 2xx without a readable body.
        failures += 1
        if failures > view.max_transport_failures:
            action = _escalate(
                view.phase,
                EscalationReason.provider_failure,
                f"transport failures {failures}/{view.max_transport_failures}: "
                f"{signal.transport_failure or kind}",
            )

    if action is None:
        action = _next_wait(view, policy, signal, reading, now=now, u=u, rate_limited=rate_limited)
        if isinstance(action, Wait):
            attempt += 1
    return Decision(
        action=action,
        transport_failures_used=failures,
        consecutive_rate_limited=rate_limited,
        poll_attempt=attempt,
    )


def decide_status_answer(
    view: PollView,
    contract: ProviderContract,
    signal: HttpSignal,
    reading: StatusReading | None,
    *,
    now: datetime,
    u: float,
) -> tuple[Decision, RowChanges]:
    """``decide_after_status`` under the contract, with the row changes the answer implies.

    Every status step (a plain poll, a convention's monitor) persists exactly these: the
    decision's counters and, when the answer was read, the remote state and progress it
    reported. A 404 is waited out only within the contract's not-found grace after
    acceptance.
    """
    grace = timedelta(seconds=contract.status.not_found_grace_seconds)
    decision = decide_after_status(
        view,
        contract.poll,
        signal,
        reading,
        now=now,
        u=u,
        not_found_allowed=now < view.accepted_at + grace,
    )
    changes: RowChanges = {
        "transport_failures_used": decision.transport_failures_used,
        "consecutive_rate_limited": decision.consecutive_rate_limited,
        "poll_attempt": decision.poll_attempt,
    }
    if reading is not None:
        changes["last_remote_state"] = storable(reading.raw_state or "")[:200] or None
        if reading.progress is not None:
            changes["progress"] = reading.progress
        # The next reading confirms this estimate or breaks the pace (estimates.agreement);
        # a reading without one clears it, so only two fresh readings ever agree.
        estimate = finish_estimate(view, reading, now=now)
        changes["estimated_finish"] = None if estimate is None else estimate.finish
    return decision, changes
