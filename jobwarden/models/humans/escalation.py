"""Escalations: the bounded options a human may pick, and what each one changes.

A decision never resets a budget counter: it raises the bound instead, and
the new bounds are recorded in the human_decision event. Two options are business
decisions automation never takes, offered after a known, final failure: ``resubmit``
(a new operation with a new token, linked both ways; never a re-send under the old
token) and ``accept_result`` (a result that failed validation, accepted as it is, with
who accepted which digest and why; it ends in ``result_accepted``, never ``succeeded``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from jobwarden.models.actions import Decided, Record
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.polling.decisions import EscalationReason
from jobwarden.models.states import ENDED_WITH_OPTIONS
from jobwarden.models.states import OperationState as S

EXTEND_BY = timedelta(minutes=15)
EXTEND_CHECKS = 4
MAX_EXTENSIONS = 1


class OptionKind(StrEnum):
    extend = "extend"  # more time and more checks, once
    resume = "resume"  # observe again after the cause was fixed (credentials, provider outage)
    cancel_at_provider = "cancel_at_provider"  # only where the contract has a cancel
    recheck_cancel = "recheck_cancel"  # look for the cancel confirmation again, fresh deadline
    recheck_cleanup = "recheck_cleanup"  # look for the cleanup confirmation again, no new call
    retry_cleanup = "retry_cleanup"  # send the cleanup call once more (a person's decision)
    abandon = "abandon"  # stop for good; the history keeps everything
    resubmit = "resubmit"  # a new operation, new token, linked both ways to this one
    accept_result = "accept_result"  # take a result that failed validation as it is


@dataclass(frozen=True, slots=True, kw_only=True)
class EscalationView:
    state: S
    reason: EscalationReason | None
    has_remote_job: bool
    contract_has_cancel: bool
    extensions_used: int
    # The business deadline passed: only cancelling the job or abandoning it are left.
    business_deadline_passed: bool = False
    # The digest of a result kept after it failed validation (None: nothing kept).
    kept_result_sha256: str | None = None
    # Already resubmitted: the replacement exists, so resubmit is not offered again.
    resubmitted_as: str | None = None
    # The contract names a check that can confirm a cleanup ([cleanup] check_path).
    cleanup_checkable: bool = False


def view_of(
    op: Operation,
    *,
    contract_has_cancel: bool,
    business_deadline_passed: bool,
    cleanup_checkable: bool = False,
) -> EscalationView:
    """What the options depend on, read off the snapshot (the two flags need the shell)."""
    summary = op.validation_summary or {}
    kept = summary.get("sha256") if summary.get("kept") is True else None
    return EscalationView(
        state=op.state,
        reason=op.escalation_reason,
        has_remote_job=op.remote_job_id is not None and op.status_url is not None,
        contract_has_cancel=contract_has_cancel,
        extensions_used=op.extensions_used,
        business_deadline_passed=business_deadline_passed,
        kept_result_sha256=kept if isinstance(kept, str) else None,
        resubmitted_as=str(op.resubmitted_as) if op.resubmitted_as is not None else None,
        cleanup_checkable=cleanup_checkable,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    kind: OptionKind
    label: str


RESUBMIT = Option(
    kind=OptionKind.resubmit,
    label="resubmit: a new operation with a new token, linked to this one",
)


def _business_options(view: EscalationView) -> list[Option]:
    """After a known, final failure: the decisions only a person takes (module docstring).

    A resubmission past the business deadline would stop at once, and one already made
    is not offered twice (the replacement exists; the link leads to it).
    """
    opts: list[Option] = []
    if view.state is S.result_validation_failed and view.kept_result_sha256 is not None:
        opts.append(
            Option(
                kind=OptionKind.accept_result,
                label=f"accept the result as it is (sha256 {view.kept_result_sha256[:12]}…), "
                "recorded as accepted, not validated",
            )
        )
    if view.resubmitted_as is None and not view.business_deadline_passed:
        opts.append(RESUBMIT)
    return opts


def options_for(view: EscalationView) -> list[Option]:
    """The options a human may pick for this stopped operation, most conservative last."""
    if view.state is S.awaiting_approval:
        return [Option(kind=OptionKind.abandon, label="reject: abandon the operation")]
    if view.state in ENDED_WITH_OPTIONS:
        return _business_options(view)
    if view.state is S.cleanup_unconfirmed:
        return _cleanup_options(view)
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
        if view.state is S.result_timed_out:
            # The job outlived its deadline: starting over is a business decision too.
            opts += _business_options(view)
    opts.append(Option(kind=OptionKind.abandon, label="abandon"))
    return opts


def _cleanup_options(view: EscalationView) -> list[Option]:
    """A cleanup nobody confirmed: look again, call once more, or leave it to a person's
    own hands (abandon: the history keeps how the job ended and what was sent)."""
    opts: list[Option] = []
    if view.cleanup_checkable:
        opts.append(
            Option(
                kind=OptionKind.recheck_cleanup,
                label="check again whether the resources are gone, fresh deadline",
            )
        )
    opts.append(Option(kind=OptionKind.retry_cleanup, label="send the cleanup call once more"))
    opts.append(Option(kind=OptionKind.abandon, label="abandon: leave the resources as they are"))
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
        return {"state": S.abandoned, "next_poll_at": None, "dispatched_at": None}
    if kind is OptionKind.extend:
        return {
            **cleared,
            "state": S.observing,
            "result_deadline": max(bounds.result_deadline, now) + EXTEND_BY,
            "max_status_requests": bounds.max_status_requests + EXTEND_CHECKS,
            "extensions_used": view.extensions_used + 1,
            "next_poll_at": now,
            "dispatched_at": now,
        }
    if kind is OptionKind.resume:
        return {
            **cleared,
            "state": S.observing,
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
            "state": S.cancel_requested,
            "cancel_deadline": now + cancel_window,
            "next_poll_at": now,
            "dispatched_at": now,
        }
    if kind in (OptionKind.recheck_cleanup, OptionKind.retry_cleanup):
        # More checks, never a reset counter; a retry is one more call, claimed as the
        # first was (cleanup_pending -> cleaning_up before it leaves).
        again = kind is OptionKind.retry_cleanup
        return {
            **cleared,
            "state": S.cleanup_pending if again else S.cleaning_up,
            "cleanup_deadline": None if again else now + cancel_window,
            "max_status_requests": bounds.max_status_requests + EXTEND_CHECKS,
            "next_poll_at": now,
            "dispatched_at": now,
        }
    if kind is not OptionKind.recheck_cancel:
        # resubmit and accept_result change no bounds: decide_option records them.
        raise RefusedInputError(f"option {kind.value} is a business decision, not a bound")
    return {
        **cleared,
        "state": S.cancelling,
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
    how much; counters are never reset (a decision raises limits instead). A resubmission
    is recorded by ``decide_resubmitted``, once its new operation exists.
    """
    if kind is OptionKind.accept_result:
        return _accepted(op, view, note)
    if kind is OptionKind.resubmit:
        raise RefusedInputError("a resubmission is recorded with its new operation")
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


def offered_with_reason(view: EscalationView, kind: OptionKind, note: str) -> str:
    """The note, stripped, when ``kind`` is on offer and the note says why; else refused."""
    offered = [o.kind.value for o in options_for(view)]
    if kind.value not in offered:
        raise RefusedInputError(
            f"option {kind.value} is not offered here; offered: {', '.join(offered) or 'none'}"
        )
    why = note.strip()
    if not why:
        # A business decision is read later by someone who was not there: it says why.
        raise RefusedInputError(f"note: say why you {kind.value.replace('_', ' ')}")
    return why


def _accepted(op: Operation, view: EscalationView, note: str) -> Decided:
    """A result that failed validation, accepted as it is: who (the event's actor), which
    digest, and why; it ends in result_accepted and the validation summary keeps its
    problem, so nothing reads it as a validated success."""
    why = offered_with_reason(view, OptionKind.accept_result, note)
    summary = op.validation_summary or {}
    record = Record(
        event=EventKind.result_accepted,
        to=S.result_accepted,
        cause=OptionKind.accept_result.value,
        excerpt={
            "option": OptionKind.accept_result.value,
            "note": why,
            "sha256": view.kept_result_sha256,
            "size_bytes": summary.get("size_bytes"),
            "validation_problem": summary.get("problem"),
        },
    )
    return Decided(action=record)


def decide_resubmitted(op: Operation, *, new_operation: uuid.UUID, note: str) -> Decided | None:
    """The link from ``op`` to the operation that replaces it, as the write it makes.

    The offer was checked (``offered_with_reason``) before the new operation was made;
    once it exists the link is a fact and is recorded whatever the state is now. None
    when ``op`` already names that replacement (a repeated resubmit writes nothing).
    """
    if op.resubmitted_as == new_operation:
        return None
    why = note.strip()
    record = Record(
        event=EventKind.resubmitted,
        cause=OptionKind.resubmit.value,
        excerpt={
            "option": OptionKind.resubmit.value,
            "note": why,
            "resubmitted_as": str(new_operation),
        },
    )
    return Decided(action=record, changes={"resubmitted_as": new_operation})
