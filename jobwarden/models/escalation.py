"""Escalations: the bounded options a human may pick, and what each one changes.

A decision never resets a budget counter: it raises the bound instead, and
the new bounds are recorded in the human_decision event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from jobwarden.models.actions import Decided, Record
from jobwarden.models.decisions import EscalationReason
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history import EventKind
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.states import OperationState as S

EXTEND_BY = timedelta(minutes=15)
EXTEND_CHECKS = 4
MAX_EXTENSIONS = 1


class OptionKind(StrEnum):
    extend = "extend"  # more time and more checks, once
    resume = "resume"  # observe again after the cause was fixed (credentials, provider outage)
    cancel_at_provider = "cancel_at_provider"  # only where the contract has a cancel
    recheck_cancel = "recheck_cancel"  # look for the cancel confirmation again, fresh deadline
    abandon = "abandon"  # stop for good; the history keeps everything


@dataclass(frozen=True, slots=True, kw_only=True)
class EscalationView:
    state: S
    reason: EscalationReason | None
    has_remote_job: bool
    contract_has_cancel: bool
    extensions_used: int
    # The business deadline passed: only cancelling the job or abandoning it are left.
    business_deadline_passed: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    kind: OptionKind
    label: str


def options_for(view: EscalationView) -> list[Option]:
    """The options a human may pick for this stopped operation, most conservative last."""
    if view.state is S.awaiting_approval:
        return [Option(kind=OptionKind.abandon, label="reject: abandon the operation")]
    if view.state not in (S.escalated, S.result_timed_out, S.cancellation_unconfirmed):
        return []
    opts: list[Option] = []
    can_observe = view.has_remote_job
    reason = view.reason
    if view.state is S.cancellation_unconfirmed:
        if view.contract_has_cancel and view.has_remote_job:
            opts.append(
                Option(
                    kind=OptionKind.recheck_cancel,
                    label="check again for the cancel confirmation, fresh deadline",
                )
            )
    else:
        budget_or_time = reason in (
            EscalationReason.deadline_exceeded,
            EscalationReason.request_budget_exhausted,
        )
        # Observing again would stop at the business deadline at once, so neither extend
        # nor resume is offered past it: the business's word is not ours to move.
        can_observe = can_observe and not view.business_deadline_passed
        if can_observe and budget_or_time and view.extensions_used < MAX_EXTENSIONS:
            opts.append(
                Option(
                    kind=OptionKind.extend,
                    label=f"extend once: +{int(EXTEND_BY.total_seconds() // 60)} min, "
                    f"+{EXTEND_CHECKS} checks",
                )
            )
        if can_observe and reason in (
            EscalationReason.rate_limited,
            EscalationReason.provider_failure,
            EscalationReason.authorization_denied,
            EscalationReason.unknown_state,
            EscalationReason.internal_error,
        ):
            opts.append(
                Option(kind=OptionKind.resume, label=f"resume observing: +{EXTEND_CHECKS} checks")
            )
        if view.contract_has_cancel and view.has_remote_job:
            opts.append(Option(kind=OptionKind.cancel_at_provider, label="cancel at provider"))
    opts.append(Option(kind=OptionKind.abandon, label="abandon"))
    return opts


@dataclass(frozen=True, slots=True, kw_only=True)
class Bounds:
    result_deadline: datetime
    max_status_requests: int
    max_transport_failures: int
    cancel_deadline: datetime | None


def apply_option(
    view: EscalationView,
    kind: OptionKind,
    bounds: Bounds,
    *,
    now: datetime,
    cancel_window: timedelta,
) -> RowChanges:
    """Row changes for a picked option; RefusedInputError if it is not on offer."""
    if kind not in {o.kind for o in options_for(view)}:
        offered = ", ".join(o.kind.value for o in options_for(view)) or "none"
        raise RefusedInputError(f"option {kind.value} is not offered here; offered: {offered}")
    cleared: RowChanges = {"escalation_reason": None, "escalation_detail": None}
    if kind is OptionKind.abandon:
        return {"state": S.abandoned.value, "next_poll_at": None, "dispatched_at": None}
    if kind is OptionKind.extend:
        return {
            **cleared,
            "state": S.observing.value,
            "result_deadline": max(bounds.result_deadline, now) + EXTEND_BY,
            "max_status_requests": bounds.max_status_requests + EXTEND_CHECKS,
            "extensions_used": view.extensions_used + 1,
            "next_poll_at": now,
            "dispatched_at": now,
        }
    if kind is OptionKind.resume:
        return {
            **cleared,
            "state": S.observing.value,
            "max_status_requests": bounds.max_status_requests + EXTEND_CHECKS,
            "max_transport_failures": bounds.max_transport_failures + EXTEND_CHECKS,
            # A streak, not a budget: a human saw it and chose to go on.
            "consecutive_rate_limited": 0,
            "result_deadline": max(bounds.result_deadline, now + EXTEND_BY),
            "next_poll_at": now,
            "dispatched_at": now,
        }
    if kind is OptionKind.cancel_at_provider:
        return {
            **cleared,
            "state": S.cancel_requested.value,
            "cancel_deadline": now + cancel_window,
            "next_poll_at": now,
            "dispatched_at": now,
        }
    return {
        **cleared,
        "state": S.cancelling.value,
        "cancel_deadline": now + cancel_window,
        "max_status_requests": bounds.max_status_requests + EXTEND_CHECKS,
        "next_poll_at": now,
        "dispatched_at": now,
    }


def decide_option(  # noqa: PLR0913 - the pick, what it is picked for, and the time
    op: Operation,
    view: EscalationView,
    kind: OptionKind,
    *,
    note: str,
    now: datetime,
    cancel_window: timedelta,
) -> Decided:
    """A human's pick as the write it makes; RefusedInputError if it is not on offer.

    The event carries the new bounds, so the history shows what a human widened and by
    how much; counters are never reset (a decision raises limits instead).
    """
    bounds = Bounds(
        result_deadline=op.result_deadline,
        max_status_requests=op.max_status_requests,
        max_transport_failures=op.max_transport_failures,
        cancel_deadline=op.cancel_deadline,
    )
    changes = apply_option(view, kind, bounds, now=now, cancel_window=cancel_window)
    shown = {
        k: (v.isoformat() if hasattr(v, "isoformat") else v)
        for k, v in changes.items()
        if k not in ("state", "dispatched_at")
    }
    to = S(changes.pop("state"))
    # The timer is the plan's to set (an ending clears it, a resumption wakes it now).
    wake = changes.pop("next_poll_at", None)
    changes.pop("dispatched_at", None)
    record = Record(
        event=EventKind.human_decision,
        to=to,
        cause=kind.value,
        excerpt={
            "option": kind.value,
            "note": note,
            "escalation_reason": reason.value if (reason := op.escalation_reason) else None,
            "new_bounds": shown,
        },
        wake_at=wake,
    )
    return Decided(action=record, changes=changes)
