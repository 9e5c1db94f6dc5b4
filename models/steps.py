"""Every step's decisions: before its one request, and after the answer.

Each step is a pair of pure functions over a frozen ``Operation``, the
``StepContext``, the time ``now`` and (after) the answer and a random draw
``u``; both return a ``Decided``. The shell (``tasks/steps.py``) sends what a
``Send`` names and persists what ``models/effects.py`` makes of the rest.
Provider input never makes these raise.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from jobwarden.models.actions import (
    Accept,
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
    Retry,
    Send,
    Succeed,
    Wait,
    escalate,
)
from jobwarden.models.backoff import backoff_delay
from jobwarden.models.contract import ReconciliationPath
from jobwarden.models.decisions import (
    CreateOutcomeKind,
    decide_after_create,
    decide_after_status,
    first_poll,
    guard_before_status_request,
    poll_view,
    wait_within,
)
from jobwarden.models.history import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.pointers import resolve_pointer
from jobwarden.models.requests import (
    StepContext,
    create_request,
    job_locator,
    lookup_request,
    resolve_url,
    result_url,
)
from jobwarden.models.results import ResultVerdict, origin_allowed, validate_result
from jobwarden.models.signals import RawResponse, SignalKind, classify_http, read_status
from jobwarden.models.states import OperationState as S

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


# --- create -----------------------------------------------------------------------------


def before_create(op: Operation, ctx: StepContext, now: datetime) -> Decided:
    if op.create_attempts > 0 and op.last_event_kind in (
        EventKind.create_sent,
        EventKind.reconcile_sent,
    ):
        # The claim committed and nothing followed: the sender died with the request
        # perhaps delivered. Only reconciliation (same token) may find out.
        return Decided(
            action=Move(
                to=S.create_unknown,
                event=EventKind.create_ambiguous,
                cause="create_sent_without_recorded_outcome",
                wake_at=now,
            )
        )
    give_up = _create_too_late(op, now)
    if give_up is not None:
        # Nothing is in flight (the check above): failing here cannot orphan a remote job.
        return Decided(action=Finish(state=S.failed, reason=give_up))
    return Decided(action=_create_send(ctx, op, EventKind.create_sent, cause=None))


def _create_too_late(op: Operation, now: datetime) -> str | None:
    if op.approval_expires_at is not None and now >= op.approval_expires_at:
        return "approval_expired before the create was sent"
    if now >= op.create_deadline:
        return "create_deadline_exceeded"
    return None


def _create_send(ctx: StepContext, op: Operation, event: EventKind, cause: str | None) -> Send:
    attempt = op.create_attempts + 1
    return Send(
        request=create_request(ctx, op),
        event=event,
        counters={"create_attempts": attempt},
        move_to=S.reconciling if op.state is S.create_unknown else None,
        cause=cause,
        excerpt={"attempt": attempt},
        deadline=op.create_deadline,
    )


def after_create(
    op: Operation,
    ctx: StepContext,
    request: ProviderRequest,
    raw: RawResponse,
    now: datetime,
    u: float,
) -> Decided:
    """What a create (or same-token reconciliation) answer means. Never a fresh token."""
    contract = ctx.contract
    reconciling = op.state is S.reconciling
    signal = classify_http(raw.observation, now=now)
    job_id, status_url = job_locator(contract, raw)
    outcome = decide_after_create(signal, job_id=job_id, known_job_id=op.remote_job_id)
    replayed = raw.observation.headers.get("idempotent-replayed", "").lower() == "true"
    seen = {"job_id": job_id}
    kind = outcome.kind
    if kind is CreateOutcomeKind.accepted and job_id is not None and status_url is not None:
        event = (
            EventKind.reconciled
            if reconciling
            else (EventKind.create_replayed if replayed else EventKind.create_accepted)
        )
        wait = first_poll(poll_view(op, accepted_at=now), contract.poll, now=now)
        return Decided(
            action=Accept(
                job_id=job_id,
                status_url=resolve_url(ctx.base_url, status_url),
                wait=wait,
                event=event,
            ),
            seen=seen,
        )
    if kind in (CreateOutcomeKind.accepted, CreateOutcomeKind.contract_violation):
        detail = (
            outcome.detail
            if kind is CreateOutcomeKind.contract_violation
            else "accepted without a status location the contract names"
        )
        # A remote job may exist: keep its id for the human who reconciles it.
        keep = job_id if op.remote_job_id is None else None
        action = escalate(op.state, EscalationReason.contract_violation, detail, keep_job_id=keep)
        return Decided(action=action, seen=seen)
    if kind is CreateOutcomeKind.authorization_denied:
        detail = f"HTTP {signal.status_code} on create"
        return Decided(action=escalate(op.state, EscalationReason.authorization_denied, detail))
    if kind is CreateOutcomeKind.refused:
        return Decided(
            action=Finish(state=S.failed, reason=outcome.detail, event=EventKind.create_refused)
        )
    ambiguous = kind is CreateOutcomeKind.ambiguous
    if op.create_attempts >= contract.limits.max_create_attempts:
        if op.state is S.create_pending and ambiguous:
            # Ambiguity must be reconciled before anyone may give up on it.
            move = Move(
                to=S.create_unknown,
                event=EventKind.create_ambiguous,
                cause=outcome.detail,
                wake_at=now,
            )
            return Decided(action=move)
        reason = (
            EscalationReason.rate_limited
            if kind is CreateOutcomeKind.rate_limited
            else EscalationReason.provider_failure
        )
        detail = f"{op.create_attempts} create attempts: {outcome.detail}"
        return Decided(action=escalate(op.state, reason, detail))
    if outcome.retry_after is not None:
        seconds, source = outcome.retry_after, DelaySource.provider_retry_after
    else:
        seconds = backoff_delay(
            attempt=op.create_attempts,
            base=contract.poll.base_seconds,
            maximum=contract.poll.max_seconds,
            jitter_floor=contract.poll.jitter_floor,
            u=u,
        )
        source = DelaySource.local_backoff
    wait = wait_within(now=now, seconds=seconds, deadline=op.create_deadline, source=source)
    if not ambiguous:
        # A 429 means the provider did not take the request: same token, later.
        retry = Retry(
            wait=wait,
            event=EventKind.create_refused,
            to=None,
            detail="rate_limited",
            counts_transport_failure=False,
        )
        return Decided(action=retry)
    # Ambiguous: the provider may have created the job; never a fresh token.
    failed_read = signal.kind in (SignalKind.transport, SignalKind.server_error)
    retry = Retry(
        wait=wait,
        event=EventKind.create_ambiguous,
        to=S.reconciling if reconciling else S.create_unknown,
        detail=outcome.detail,
        counts_transport_failure=failed_read,
    )
    return Decided(action=retry)


# --- reconcile --------------------------------------------------------------------------


def before_reconcile(op: Operation, ctx: StepContext, now: datetime) -> Decided:
    spec = ctx.contract.reconciliation
    if spec.path is ReconciliationPath.none:
        detail = (
            "create outcome unknown and the contract has no reconciliation "
            "path: at-most-once cannot be proven"
        )
        return Decided(action=escalate(op.state, EscalationReason.unknown_state, detail))
    if now >= op.create_deadline:
        detail = "create deadline passed while reconciling"
        return Decided(action=escalate(op.state, EscalationReason.deadline_exceeded, detail))
    if spec.path is ReconciliationPath.lookup_by_reference and spec.lookup_path:
        send = _create_send(ctx, op, EventKind.reconcile_sent, cause=spec.path.value)
        return Decided(action=replace(send, request=lookup_request(ctx, op, spec.lookup_path)))
    return Decided(action=_create_send(ctx, op, EventKind.reconcile_sent, cause=spec.path.value))


def after_reconcile(
    op: Operation,
    ctx: StepContext,
    request: ProviderRequest,
    raw: RawResponse,
    now: datetime,
    u: float,
) -> Decided:
    if request.purpose is RequestPurpose.create:
        return after_create(op, ctx, request, raw, now, u)
    contract = ctx.contract
    signal = classify_http(raw.observation, now=now)
    pointer = contract.reconciliation.lookup_job_id_pointer or "/data/0/id"
    found = resolve_pointer(raw.observation.body, pointer) if signal.kind is SignalKind.ok else None
    if isinstance(found, str) and found:
        if contract.status.path is None:
            detail = "lookup found a job but the contract has no status path"
            action = escalate(
                op.state, EscalationReason.contract_violation, detail, keep_job_id=found
            )
            return Decided(action=action, answered="lookup response")
        url = resolve_url(ctx.base_url, contract.status.path.replace("{job_id}", found))
        wait = first_poll(poll_view(op, accepted_at=now), contract.poll, now=now)
        accept = Accept(job_id=found, status_url=url, wait=wait, event=EventKind.reconciled)
        return Decided(action=accept, seen={"job_id": found})
    # Nothing under our token: resending the create with the same token is safe.
    cause = f"lookup found no job under our token (http {signal.status_code or '-'})"
    send = _create_send(ctx, op, EventKind.reconcile_sent, cause=cause)
    return Decided(action=send, answered="lookup response")


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
    used = op.status_requests_used + 1
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
    contract = ctx.contract
    view = poll_view(op)
    signal = classify_http(raw.observation, now=now)
    reading = None
    body = ctx.status_body(raw.observation.body)
    if signal.kind in (SignalKind.ok, SignalKind.accepted) and isinstance(body, dict):
        reading = read_status(contract, body, now=now, deadline=view.deadline)
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
    changes: dict[str, Any] = {
        "transport_failures_used": decision.transport_failures_used,
        "consecutive_rate_limited": decision.consecutive_rate_limited,
        "poll_attempt": decision.poll_attempt,
    }
    seen: dict[str, Any] = {"signal": signal.kind.value}
    if reading is not None:
        changes["last_remote_state"] = (reading.raw_state or "")[:200] or None
        if reading.progress is not None:
            changes["progress"] = reading.progress
        seen |= {
            "remote_state": reading.raw_state,
            "remote_status": reading.remote_status.value,
            "progress": reading.progress,
            "contradiction": reading.contradiction,
        }
    action = decision.action
    if isinstance(action, Collect):
        action = Collect(result_ref=action.result_ref, expected=_expected(ctx, body))
    return Decided(action=action, changes=changes, seen=seen)


def _expected(ctx: StepContext, body: object) -> dict[str, Any]:
    """What the status body promised about the result, checked when it is collected."""
    expected: dict[str, Any] = {}
    spec = ctx.contract.result
    if spec is not None and spec.checksum_pointer:
        sha = resolve_pointer(body, spec.checksum_pointer)
        expected["expected_sha256"] = sha if isinstance(sha, str) else None
    if spec is not None and spec.fetch == "inline" and ctx.contract.status.result_ref_pointer:
        inline = resolve_pointer(body, ctx.contract.status.result_ref_pointer)
        expected["inline"] = inline if isinstance(inline, dict | list) else None
    return expected


# --- cancel -----------------------------------------------------------------------------


def before_cancel(op: Operation, ctx: StepContext, now: datetime) -> Decided:
    contract = ctx.contract
    if contract.cancel is None or op.remote_job_id is None:
        detail = "the contract has no cancel endpoint"
        return Decided(action=escalate(op.state, EscalationReason.cancellation_unconfirmed, detail))
    deadline = op.cancel_deadline or now + timedelta(
        seconds=contract.limits.cancel_deadline_seconds
    )
    first = now + timedelta(seconds=contract.poll.initial_delay_seconds)
    url = resolve_url(ctx.base_url, contract.cancel.path.replace("{job_id}", op.remote_job_id))
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
        cause="cancel sent; confirm by status reads",
    )
    return Decided(action=wait, answered="cancel response")


# --- collect ----------------------------------------------------------------------------


def _result_ending(
    op: Operation, verdict: ResultVerdict, content: bytes, ctype: str | None
) -> Decided:
    if not verdict.valid:
        finish = Finish(
            state=S.result_validation_failed,
            reason=verdict.problem or "invalid",
            event=EventKind.result_rejected,
            summary=verdict.summary(),
        )
        return Decided(action=finish)
    return Decided(action=Succeed(verdict=verdict, content=content, content_type=ctype))


def _unavailable(problem: str) -> Decided:
    return Decided(
        action=Finish(
            state=S.result_unavailable,
            reason=problem,
            event=EventKind.result_rejected,
            summary={"valid": False, "problem": problem},
        )
    )


def before_collect(op: Operation, ctx: StepContext, now: datetime) -> Decided:
    spec = ctx.contract.result
    expected: dict[str, Any] = dict((op.validation_summary or {}).get("expected") or {})
    if spec is None:
        note = "contract declares no result; nothing to fetch"
        return Decided(action=Succeed(verdict=None, content=None, content_type=None, note=note))
    if spec.fetch == "inline":
        inline = expected.get("inline")
        content = json.dumps(inline, separators=(",", ":")).encode() if inline is not None else b""
        if not content:
            return _unavailable("inline result missing")
        ctype = "application/json"  # serialised here from the status body
        verdict = validate_result(
            spec,
            content=content,
            content_type=ctype,
            expected_sha256=expected.get("expected_sha256"),
            declared_record_count=None,
        )
        return _result_ending(op, verdict, content, ctype)
    url = result_url(ctx, op)
    if url is None:
        return _unavailable("no result reference")
    if not origin_allowed(ctx.contract, ctx.base_url, url):
        # Invariant 10: the credential goes only where the contract says; nothing is sent.
        return _unavailable(f"result origin not allowed by the contract: {url.split('?')[0]}")
    return Decided(
        action=Send(
            request=ProviderRequest(purpose=RequestPurpose.result, method="GET", url=url),
            event=EventKind.result_fetch_sent,
            excerpt={"url": url.split("?")[0]},
        )
    )


def after_collect(
    op: Operation,
    ctx: StepContext,
    request: ProviderRequest,
    raw: RawResponse,
    now: datetime,
    u: float,
) -> Decided:
    contract = ctx.contract
    spec = contract.result
    # A result is bytes of the contract's type (CSV, JSON Lines): its body is not judged here.
    signal = classify_http(raw.observation, now=now, json_body=False)
    code = signal.status_code
    if spec is not None and signal.kind in (SignalKind.ok, SignalKind.accepted):
        expected = dict((op.validation_summary or {}).get("expected") or {})
        verdict = validate_result(
            spec,
            content=raw.content,
            content_type=raw.content_type,
            expected_sha256=expected.get("expected_sha256"),
            declared_record_count=None,
        )
        return _result_ending(op, verdict, raw.content, raw.content_type)
    if signal.kind in (SignalKind.unauthorized, SignalKind.forbidden):
        detail = f"HTTP {code} fetching the result"
        denied = escalate(op.state, EscalationReason.authorization_denied, detail)
        return Decided(action=denied, answered="result fetch")
    if signal.kind in (SignalKind.not_found, SignalKind.gone):
        return _unavailable(f"HTTP {code} fetching the result")
    # A failed download is not a failed job: spend the transport budget, then stop.
    used = op.transport_failures_used + 1
    if used > op.max_transport_failures:
        detail = "transport failure budget spent fetching the result"
        spent = escalate(op.state, EscalationReason.provider_failure, detail)
        return Decided(
            action=spent, changes={"transport_failures_used": used}, answered="result fetch"
        )
    seconds = backoff_delay(
        attempt=used,
        base=contract.poll.base_seconds,
        maximum=contract.poll.max_seconds,
        jitter_floor=contract.poll.jitter_floor,
        u=u,
    )
    wait = Wait(
        until=now + timedelta(seconds=seconds),
        delay_seconds=seconds,
        delay_source=DelaySource.local_backoff,
        clipped_to_deadline=False,
        cause="result fetch failed; retry",
    )
    return Decided(action=wait, changes={"transport_failures_used": used}, answered="result fetch")


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
    if op.state is S.create_pending:
        reason = (
            f"{_create_too_late(op, now) or 'create_deadline_exceeded'}; reserved create not sent"
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
    states=frozenset({S.accepted, S.observing, S.cancelling}),
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
STEPS: tuple[StepKind, ...] = (CREATE, RECONCILE, POLL, CANCEL, COLLECT)
