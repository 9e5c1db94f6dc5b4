"""Every step's decisions: before its one request, and after the answer.

Poll and cancel live here; create and reconcile in ``create_decisions``,
collect in ``result_decisions``; ``STEPS`` binds each to its states.

Each step is a pair of pure functions over a frozen ``Operation``, the
``StepContext``, the time ``now`` and (after) the answer and a random draw
``u``; both return a ``Decided``. The shell (``tasks/steps.py``) sends what a
``Send`` names and persists what ``models/effects.py`` makes of the rest.
Provider input never makes these raise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from jobwarden.models.actions import (
    Action,
    Collect,
    Decided,
    DelaySource,
    Escalate,
    EscalationReason,
    Finish,
    Move,
    NotYet,
    ProviderRequest,
    RequestPurpose,
    Send,
    Wait,
    escalate,
)
from jobwarden.models.cleanup import after_cleanup, before_cleanup
from jobwarden.models.conventions.steps import after_monitor_poll
from jobwarden.models.create_decisions import (
    after_create,
    after_reconcile,
    before_create,
    before_reconcile,
    create_too_late,
)
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.approvals import decide_window
from jobwarden.models.operation import Operation
from jobwarden.models.polling.decisions import (
    decide_status_answer,
    guard_before_status_request,
    poll_view,
    wait_within,
)
from jobwarden.models.provider.origins import on_allowed_origin, shown_url, usable_url
from jobwarden.models.provider.requests import (
    StepContext,
    job_path,
    resolve_url,
)
from jobwarden.models.provider.signals import RawResponse, SignalKind, classify_http, read_status
from jobwarden.models.results.collection import collection, partial_collection
from jobwarden.models.results.decisions import after_collect, before_collect
from jobwarden.models.states import CLEANING, POLLED
from jobwarden.models.states import OperationState as S

__all__ = [
    "APPROVAL_WINDOW",
    "CANCEL",
    "CLEANUP",
    "COLLECT",
    "CREATE",
    "POLL",
    "RECONCILE",
    "STEPS",
    "StepKind",
    "after_cancel",
    "after_collect",
    "after_create",
    "after_poll",
    "after_reconcile",
    "before_cancel",
    "before_collect",
    "before_create",
    "before_poll",
    "before_reconcile",
    "unsent",
]

Before = Callable[[Operation, StepContext, datetime], Decided]
After = Callable[[Operation, StepContext, ProviderRequest, RawResponse, datetime, float], Decided]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepKind:
    """One step of the pipeline: the states it acts in, its decisions, its fault points."""

    name: str
    states: frozenset[S]
    before: Before
    after: After
    claim_point: str  # named fault point right after the claim commits
    response_point: str  # right after the provider answered, before recording


# --- poll -------------------------------------------------------------------------------


def before_poll(op: Operation, ctx: StepContext, now: datetime) -> Decided:
    view = poll_view(op)
    guard = guard_before_status_request(view, now=now)
    if isinstance(guard, NotYet):
        # A duplicate or early message: the legitimate one (or the sweeper) comes later.
        return Decided(action=NotYet(until=None))
    if guard is not None:
        return Decided(action=guard)
    if op.status_url is None:
        detail = "no status URL recorded"
        return Decided(action=escalate(op.state, EscalationReason.contract_violation, detail))
    if not (usable_url(op.status_url) and on_allowed_origin(op.status_url, ctx.base_url)):
        # Checked again before every poll, not only at accept: a row written before the
        # check existed, or a changed base URL, must not send the credential elsewhere.
        detail = f"status URL on an origin the contract does not allow: {shown_url(op.status_url)}"
        return Decided(action=escalate(op.state, EscalationReason.contract_violation, detail))
    if op.poll_not_before is not None and now < op.poll_not_before:
        # Woken early by a person (cancel, resume) after the provider asked us to wait: the
        # provider's word still holds (invariant 3), so wait out its Retry-After first.
        wait = wait_within(
            now=now,
            seconds=(op.poll_not_before - now).total_seconds(),
            deadline=view.deadline,
            source=DelaySource.provider_retry_after,
            cause="the provider's last Retry-After still holds",
        )
        return Decided(action=wait)
    if op.cancel_requested_by is not None and op.state in (S.accepted, S.observing):
        # A cancel asked for before the remote job was known (create ambiguous, or not
        # yet accepted): now that it is, carry it out instead of observing.
        move = Move(
            to=S.cancel_requested,
            event=EventKind.decision,
            cause="carrying out the cancel requested before the remote job was known",
            wake_at=now,
        )
        return Decided(action=move)
    used = op.status_requests_used + 1
    # As written, this Send claims a fresh request with a commit of its own; the shell
    # spends the reservation instead when it may (``reservations.reserved_send``).
    return Decided(
        action=Send(
            request=ProviderRequest(
                purpose=RequestPurpose.status,
                method=ctx.contract.status.method,
                url=op.status_url,
            ),
            event=EventKind.poll_sent,
            counters={"status_requests_used": used},
            move_to=S.observing if op.state is S.accepted else None,
            changes={"reserved_request": None} if op.reserved_request is not None else {},
            cause=(
                f"reserved request {op.reserved_request} may have left without an answer: "
                "it stays counted and is not reused"
                if op.reserved_request is not None
                else None
            ),
            excerpt={"request": used, "of": op.max_status_requests},
            deadline=view.deadline,
        )
    )


def after_poll(
    op: Operation,
    ctx: StepContext,
    request: ProviderRequest,
    raw: RawResponse,
    now: datetime,
    u: float,
) -> Decided:
    if op.polling_mode is not None:
        # Polled through an Azure monitor: the convention reads the answer.
        return after_monitor_poll(op, ctx, raw, now, u)
    contract = ctx.contract
    view = poll_view(op)
    signal = classify_http(raw.observation, now=now)
    reading = None
    body = ctx.status_body(raw.observation.body)
    if signal.kind in (SignalKind.ok, SignalKind.accepted) and isinstance(body, dict):
        reading = read_status(contract, body, now=now, deadline=view.deadline)
    decision, changes = decide_status_answer(view, contract, signal, reading, now=now, u=u)
    seen: dict[str, Any] = {"signal": signal.kind.value}
    if reading is not None:
        seen |= {
            "remote_state": reading.raw_state,
            "remote_status": reading.remote_status.value,
            "progress": reading.progress,
            "contradiction": reading.contradiction,
        }
    action: Action = decision.action
    if isinstance(action, Collect):
        action = collection(op.state, ctx, action.result_ref, body, now)
    elif isinstance(action, Finish) and reading is not None:
        action = partial_collection(op.state, ctx, action, reading.result_ref, body, now=now)
    return Decided(action=action, changes=changes, seen=seen)


# --- cancel -----------------------------------------------------------------------------


def before_cancel(op: Operation, ctx: StepContext, now: datetime) -> Decided:
    contract = ctx.contract
    if contract.cancel is None or op.remote_job_id is None:
        detail = (
            "the contract has no cancel endpoint"
            if contract.cancel is None
            else "no remote job id is known to cancel"
        )
        return Decided(action=escalate(op.state, EscalationReason.cancellation_unconfirmed, detail))
    window = op.cancel_window_seconds or contract.limits.cancel_deadline_seconds
    deadline = op.cancel_deadline or now + timedelta(seconds=window)
    first = now + timedelta(seconds=contract.poll.initial_delay_seconds)
    if op.poll_not_before is not None:
        # The confirming poll honours the provider's last Retry-After (invariant 3).
        first = max(first, op.poll_not_before)
    url = resolve_url(ctx.base_url, job_path(contract.cancel.path, op.remote_job_id))
    if not (usable_url(url) and on_allowed_origin(url, ctx.base_url)):
        detail = f"cancel URL on an origin the contract does not allow: {shown_url(url)}"
        return Decided(action=escalate(op.state, EscalationReason.contract_violation, detail))
    return Decided(
        action=Send(
            request=ProviderRequest(
                purpose=RequestPurpose.cancel, method=contract.cancel.method, url=url
            ),
            event=EventKind.cancel_sent,
            move_to=S.cancelling,
            changes={"cancel_deadline": deadline},
            # The confirmation polls start from this timer even if the sender dies now.
            wake_at=min(first, deadline),
        )
    )


def after_cancel(
    op: Operation,
    ctx: StepContext,
    request: ProviderRequest,
    raw: RawResponse,
    now: datetime,
    u: float,
) -> Decided:
    signal = classify_http(raw.observation, now=now)
    if signal.kind in (SignalKind.unauthorized, SignalKind.forbidden):
        # Confirmation polls with the same credential cannot succeed: stop now, say why.
        detail = f"HTTP {signal.status_code} on cancel"
        action = escalate(op.state, EscalationReason.authorization_denied, detail)
        return Decided(action=action, answered="cancel response")
    # Sending DELETE is not cancelled: only a status read may confirm it.
    until = op.next_poll_at or now
    wait = Wait(
        until=until,
        delay_seconds=max(0.0, (until - now).total_seconds()),
        delay_source=DelaySource.initial_delay,
        clipped_to_deadline=op.cancel_deadline is not None and until >= op.cancel_deadline,
        cause=(
            "cancel sent; confirm by status reads"
            if ctx.contract.cancel is not None
            and signal.status_code in ctx.contract.cancel.accepted_statuses
            else f"cancel not accepted (http {signal.status_code or '-'}): "
            "the status reads say what the job does"
        ),
    )
    return Decided(action=wait, answered="cancel response")


# --- a reserved request whose deadline passed before it left ----------------------------


def unsent(op: Operation, send: Send, now: datetime) -> Decided | None:
    """After the claim commits, the deadline is checked again; None means: send it.

    A request not sent is said so in the history next to its claim, so the claim is
    never mistaken for a lost send (the create path would otherwise reconcile it).
    """
    if send.deadline is None or now < send.deadline:
        return None
    purpose = send.request.purpose
    if purpose is RequestPurpose.status:
        late = guard_before_status_request(replace(poll_view(op), next_poll_at=None), now=now)
        if isinstance(late, Escalate):
            detail = f"{late.detail}; reserved request not sent"
            return Decided(action=replace(late, detail=detail))
        return None
    if purpose is RequestPurpose.cleanup_check:
        detail = "cleanup deadline passed; reserved check not sent"
        return Decided(action=escalate(op.state, EscalationReason.deadline_exceeded, detail))
    if purpose in (RequestPurpose.result, RequestPurpose.failed_items):
        if op.collect_deadline is not None and now < op.collect_deadline:
            # The signed URL's end came first (result.url_expiry_pointer): the next collect
            # step decides (a fresh URL, or the end) from the expiry it reads again.
            return Decided(action=NotYet(until=now))
        detail = "result fetch deadline passed; reserved download not sent"
        return Decided(action=escalate(op.state, EscalationReason.deadline_exceeded, detail))
    if op.state is S.create_pending:
        reason = (
            f"{create_too_late(op, now) or 'create_deadline_exceeded'}; reserved create not sent"
        )
        return Decided(action=Finish(state=S.failed, reason=reason))
    detail = "create deadline passed while reconciling; reserved request not sent"
    return Decided(action=escalate(op.state, EscalationReason.deadline_exceeded, detail))


CREATE = StepKind(
    name="create",
    states=frozenset({S.create_pending}),
    before=before_create,
    after=after_create,
    claim_point="after_create_sent_commit",
    response_point="after_create_response",
)
RECONCILE = StepKind(
    name="reconcile",
    states=frozenset({S.create_unknown, S.reconciling}),
    before=before_reconcile,
    after=after_reconcile,
    claim_point="after_reconcile_claim",
    response_point="after_reconcile_response",
)
POLL = StepKind(
    name="poll",
    states=POLLED,
    before=before_poll,
    after=after_poll,
    claim_point="after_poll_claim",
    response_point="after_poll_response",
)
CANCEL = StepKind(
    name="cancel",
    states=frozenset({S.cancel_requested}),
    before=before_cancel,
    after=after_cancel,
    claim_point="after_cancel_claim",
    response_point="after_cancel_response",
)
COLLECT = StepKind(
    name="collect",
    states=frozenset({S.result_collecting}),
    before=before_collect,
    after=after_collect,
    claim_point="after_collect_claim",
    response_point="after_collect_response",
)
CLEANUP = StepKind(
    name="cleanup",
    states=CLEANING,
    before=before_cleanup,
    after=after_cleanup,
    claim_point="after_cleanup_claim",
    response_point="after_cleanup_response",
)
STEPS: tuple[StepKind, ...] = (CREATE, RECONCILE, POLL, CANCEL, COLLECT, CLEANUP)


# --- the approval window ----------------------------------------------------------------


def before_approval_window(op: Operation, ctx: StepContext, now: datetime) -> Decided:
    return decide_window(op, now)


def _sends_nothing(*_: object) -> Decided:
    raise AssertionError("the approval-window step sends no request")  # pragma: no cover


# Not a worked step (no request, nothing to stop): it only ends an operation whose
# approval window closed unapproved, woken by the sweeper at the window's end.
APPROVAL_WINDOW = StepKind(
    name="approval_window",
    states=frozenset({S.awaiting_approval}),
    before=before_approval_window,
    after=_sends_nothing,
    claim_point="after_approval_window_claim",
    response_point="after_approval_window_response",
)
