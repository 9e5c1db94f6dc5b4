"""The create and reconcile decisions: the only ones that may send a create.

Every send carries the operation's one provider token; an answer that may have
created a job without saying which is ambiguous and goes to reconciliation with
the same token, never to a fresh one (invariant 2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from jobwarden.models.actions import (
    Accept,
    Collect,
    Decided,
    Escalate,
    EscalationReason,
    Finish,
    Move,
    NotYet,
    ProviderRequest,
    RequestPurpose,
    Retry,
    Send,
    escalate,
)
from jobwarden.models.contracts.contract import ReconciliationPath, RemoteStatus
from jobwarden.models.conventions.steps import convention_create
from jobwarden.models.conventions.strategies import AZURE
from jobwarden.models.create_outcomes import (
    CreateOutcome,
    CreateOutcomeKind,
    decide_after_create,
)
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.polling.backoff import validate_poll_hint
from jobwarden.models.polling.business_deadline import earlier, passed
from jobwarden.models.polling.decisions import (
    PollView,
    action_for_reading,
    first_poll,
    poll_view,
    retry_wait,
)
from jobwarden.models.provider.origins import on_allowed_origin, shown_url, usable_url
from jobwarden.models.provider.pointers import MISSING, resolve_pointer
from jobwarden.models.provider.requests import (
    StepContext,
    create_request,
    job_id_problem,
    job_locator,
    job_path,
    lookup_request,
    resolve_url,
)
from jobwarden.models.provider.signals import (
    HttpSignal,
    RawResponse,
    SignalKind,
    classify_http,
    read_status,
)
from jobwarden.models.results.collection import collection
from jobwarden.models.states import OperationState as S

# --- create -----------------------------------------------------------------------------


def not_yet(op: Operation, now: datetime) -> Decided | None:
    """An early or duplicated message (invariant 8): the row's timer has not come yet."""
    if op.next_poll_at is not None and now < op.next_poll_at:
        return Decided(action=NotYet(until=op.next_poll_at))
    return None


def before_create(op: Operation, ctx: StepContext, now: datetime) -> Decided:
    early = not_yet(op, now)
    if early is not None:
        return early
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
    give_up = create_too_late(op, now)
    if give_up is not None:
        # Nothing is in flight (the check above): failing here cannot orphan a remote job.
        return Decided(action=Finish(state=S.failed, reason=give_up))
    return Decided(action=_create_send(ctx, op, EventKind.create_sent, cause=None, now=now))


def create_too_late(op: Operation, now: datetime) -> str | None:
    if op.approval_expires_at is not None and now >= op.approval_expires_at:
        return "approval_expired before the create was sent"
    if passed(op.business_deadline, now):
        return "business_deadline_exceeded before the create was sent"
    if now >= op.create_deadline:
        return "create_deadline_exceeded"
    return None


def _create_send(
    ctx: StepContext, op: Operation, event: EventKind, cause: str | None, now: datetime
) -> Send:
    attempt = op.create_attempts + 1
    # The first claim fixes the first-sent time; every retry reads it from the row.
    first = op.first_sent_at or now
    return Send(
        request=create_request(ctx, op, first),
        event=event,
        counters={"create_attempts": attempt},
        changes={} if op.first_sent_at else {"first_sent_at": first},
        move_to=S.reconciling if op.state is S.create_unknown else None,
        cause=cause,
        excerpt={"attempt": attempt},
        deadline=earlier(op.create_deadline, op.business_deadline),
    )


def accept(
    op: Operation,
    ctx: StepContext,
    job_id: str,
    status_url: str,
    event: EventKind,
    now: datetime,
    raw: RawResponse | None = None,
) -> Decided:
    """Accept the remote job, unless its id or status URL could not be used safely.

    The status URL is where every poll will send the credential: it must be on an origin
    the contract allows (invariant 10), or nothing is ever sent to it.
    """
    seen = {"job_id": job_id}
    problem = job_id_problem(ctx.contract, job_id)
    if problem is None and not (
        usable_url(status_url) and on_allowed_origin(status_url, ctx.base_url)
    ):
        problem = f"status URL on an origin the contract does not allow: {shown_url(status_url)}"
    if problem is not None:
        keep = job_id if job_id_problem(ctx.contract, job_id) is None else None
        action = escalate(op.state, EscalationReason.contract_violation, problem, keep_job_id=keep)
        return Decided(action=action, seen=seen)
    view = poll_view(op, accepted_at=now)
    retry_after, hint = _asked_delay(ctx, raw, now, view.deadline)
    wait = first_poll(view, ctx.contract.poll, now=now, retry_after=retry_after, poll_hint=hint)
    then = synchronous_outcome(ctx, raw, view, now) if raw is not None else None
    accept_action = Accept(job_id=job_id, status_url=status_url, wait=wait, event=event, then=then)
    return Decided(action=accept_action, seen=seen)


def synchronous_outcome(
    ctx: StepContext, raw: RawResponse, view: PollView, now: datetime
) -> Collect | Finish | Escalate | None:
    """What a create answer that already says how the job ended leads to, or None.

    The answer is read through the state table like a status answer, but only when
    it carries a state (or an error) where the contract says: a create body without
    one says nothing about the job's end.
    """
    body = ctx.status_body(raw.observation.body)
    if not isinstance(body, dict):
        return None
    spec = ctx.contract.status
    carries_state = (
        spec.state_pointer is not None and resolve_pointer(body, spec.state_pointer) is not MISSING
    ) or (
        spec.error_pointer is not None
        and resolve_pointer(body, spec.error_pointer) not in (MISSING, None)
    )
    if not carries_state:
        return None
    reading = read_status(ctx.contract, body, now=now, deadline=view.deadline)
    if reading.remote_status in (RemoteStatus.pending, RemoteStatus.unknown):
        return None
    outcome = action_for_reading(view, reading)
    if isinstance(outcome, Collect):
        return collection(S.observing, ctx, outcome.result_ref, body, now)
    if isinstance(outcome, Finish | Escalate):
        return outcome
    return None


def _asked_delay(
    ctx: StepContext, raw: RawResponse | None, now: datetime, deadline: datetime
) -> tuple[float | None, float | None]:
    """The Retry-After and poll hint an answer carries (valid ones only), in seconds."""
    if raw is None:
        return None, None
    signal = classify_http(raw.observation, now=now)
    retry_after = signal.retry_after.seconds if signal.retry_after.valid else None
    hint: float | None = None
    pointer = ctx.contract.status.poll_hint_pointer
    body = raw.observation.body
    if pointer is not None and isinstance(body, dict):
        found = validate_poll_hint(resolve_pointer(body, pointer), now=now, deadline=deadline)
        hint = found.seconds if found.valid else None
    return retry_after, hint


@dataclass(frozen=True, slots=True, kw_only=True)
class _CreateAnswer:
    """A create (or same-token reconciliation) answer, read once for every branch."""

    signal: HttpSignal
    outcome: CreateOutcome
    job_id: str | None
    status_url: str | None
    reconciling: bool
    replayed: bool  # the provider says it replayed the answer to our token

    @property
    def located(self) -> tuple[str, str] | None:
        """The job id and status URL, when the answer names both."""
        if self.job_id is None or self.status_url is None:
            return None
        return self.job_id, self.status_url

    @property
    def accepted_as(self) -> EventKind:
        """The event that records the job this answer names."""
        if self.reconciling:
            return EventKind.reconciled
        return EventKind.create_replayed if self.replayed else EventKind.create_accepted


def after_create(
    op: Operation,
    ctx: StepContext,
    request: ProviderRequest,
    raw: RawResponse,
    now: datetime,
    u: float,
) -> Decided:
    """What a create (or same-token reconciliation) answer means. Never a fresh token."""
    answer = _read_create_answer(op, ctx, raw, now)
    in_place = _answered_in_place(op, ctx, raw, answer, now)
    if in_place is not None:
        return in_place
    outcome = answer.outcome
    match outcome.kind:
        case CreateOutcomeKind.accepted if answer.located is not None:
            job_id, status_url = answer.located
            url = resolve_url(ctx.base_url, status_url)
            return accept(op, ctx, job_id, url, answer.accepted_as, now, raw)
        case CreateOutcomeKind.accepted | CreateOutcomeKind.contract_violation:
            return _job_in_doubt(op, ctx, answer)
        case CreateOutcomeKind.authorization_denied:
            detail = f"HTTP {answer.signal.status_code} on create"
            return Decided(action=escalate(op.state, EscalationReason.authorization_denied, detail))
        case CreateOutcomeKind.refused:
            refused = Finish(state=S.failed, reason=outcome.detail, event=EventKind.create_refused)
            return Decided(action=refused)
        case CreateOutcomeKind.in_flight:
            return _still_in_flight(op, ctx, answer, now, u)
        case CreateOutcomeKind.ambiguous | CreateOutcomeKind.rate_limited:
            return _sent_again_later(op, ctx, answer, now, u)


def _read_create_answer(
    op: Operation, ctx: StepContext, raw: RawResponse, now: datetime
) -> _CreateAnswer:
    contract = ctx.contract
    signal = classify_http(raw.observation, now=now)
    job_id, status_url = job_locator(contract, raw)
    spec = contract.create
    in_flight = signal.status_code in spec.in_flight_statuses and (
        spec.in_flight_pointer is None
        or resolve_pointer(raw.observation.body, spec.in_flight_pointer) in spec.in_flight_values
    )
    outcome = decide_after_create(
        signal,
        job_id=job_id,
        known_job_id=op.remote_job_id,
        in_flight=in_flight,
        accepted=signal.status_code in spec.accepted_statuses,
    )
    return _CreateAnswer(
        signal=signal,
        outcome=outcome,
        job_id=job_id,
        status_url=status_url,
        reconciling=op.state is S.reconciling,
        replayed=raw.observation.headers.get("idempotent-replayed", "").lower() == "true",
    )


def _answered_in_place(
    op: Operation, ctx: StepContext, raw: RawResponse, answer: _CreateAnswer, now: datetime
) -> Decided | None:
    """A 2xx answer read before its outcome: by the Azure convention the contract names,
    or as a result answered in place of a job. None: the outcome decides."""
    if answer.signal.kind not in (SignalKind.ok, SignalKind.accepted):
        return None
    if ctx.contract.convention in AZURE:
        # An Azure convention reads its own 2xx create answers (models/conventions/steps.py):
        # which header names the monitor, and whether the answer already ended the job.
        by_convention = convention_create(op, ctx, raw, answer.accepted_as, now)
        if by_convention is not None:
            return by_convention
    if answer.job_id is not None:
        return None
    # A result answered in place of a job (a synchronous provider): nothing to poll,
    # so it is collected (or ended) under this operation, and the history says so.
    view = poll_view(op, accepted_at=now)
    sync = synchronous_outcome(ctx, raw, view, now)
    if sync is None:
        return None
    wait = first_poll(view, ctx.contract.poll, now=now)
    event = EventKind.reconciled if answer.reconciling else EventKind.create_accepted
    in_place = Accept(job_id=None, status_url=None, wait=wait, event=event, then=sync)
    return Decided(action=in_place, seen={"synchronous": True})


def _job_in_doubt(op: Operation, ctx: StepContext, answer: _CreateAnswer) -> Decided:
    """Accepted without a status location, or a contract violation: a remote job may
    exist, so a person reconciles it, with its id kept (if it can be stored as is; an
    unusable one stays in the observation's excerpt only)."""
    outcome, job_id = answer.outcome, answer.job_id
    detail = (
        outcome.detail
        if outcome.kind is CreateOutcomeKind.contract_violation
        else "accepted without a status location the contract names"
    )
    usable = job_id is not None and job_id_problem(ctx.contract, job_id) is None
    keep = job_id if op.remote_job_id is None and usable else None
    action = escalate(op.state, EscalationReason.contract_violation, detail, keep_job_id=keep)
    return Decided(action=action, seen={"job_id": job_id})


def _still_in_flight(
    op: Operation, ctx: StepContext, answer: _CreateAnswer, now: datetime, u: float
) -> Decided:
    """The provider still works on our first request: the outcome is not known yet, and
    only the same token, later, may learn it (never a fresh one). Waiting for it is not a
    failed attempt: it is bounded by the create deadline, not by max_create_attempts (a
    first answer delayed 40 s must not exhaust five attempts)."""
    wait = retry_wait(
        answer.outcome.retry_after,
        ctx.contract.poll,
        attempt=op.create_attempts,
        u=u,
        now=now,
        deadline=earlier(op.create_deadline, op.business_deadline),
    )
    # The provider holds our request, so a job may come of it: the create's outcome
    # is unknown, and a deadline that passes now is reconciliation's to escalate,
    # never a quiet `failed` that would orphan the job the provider then creates.
    retry = Retry(
        wait=wait,
        event=EventKind.create_ambiguous,
        to=None if answer.reconciling else S.create_unknown,
        detail=answer.outcome.detail,
        counts_transport_failure=False,
    )
    return Decided(action=retry)


def _sent_again_later(
    op: Operation, ctx: StepContext, answer: _CreateAnswer, now: datetime, u: float
) -> Decided:
    """An ambiguous answer or a 429: the same token again later, within the contract's
    create attempts; past them, an ambiguity is reconciled first and anything else stops."""
    contract, outcome = ctx.contract, answer.outcome
    ambiguous = outcome.kind is CreateOutcomeKind.ambiguous
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
        reason = EscalationReason.provider_failure if ambiguous else EscalationReason.rate_limited
        detail = f"{op.create_attempts} create attempts: {outcome.detail}"
        return Decided(action=escalate(op.state, reason, detail))
    wait = retry_wait(
        outcome.retry_after,
        contract.poll,
        attempt=op.create_attempts,
        u=u,
        now=now,
        deadline=earlier(op.create_deadline, op.business_deadline),
    )
    if not ambiguous:
        # A 429 means the provider did not take the request: same token, later.
        retry = Retry(
            wait=wait,
            event=EventKind.create_rate_limited,
            to=None,
            detail="rate_limited",
            counts_transport_failure=False,
        )
        return Decided(action=retry)
    # Ambiguous: the provider may have created the job; never a fresh token.
    failed_read = answer.signal.kind in (SignalKind.transport, SignalKind.server_error)
    retry = Retry(
        wait=wait,
        event=EventKind.create_ambiguous,
        to=S.reconciling if answer.reconciling else S.create_unknown,
        detail=outcome.detail,
        counts_transport_failure=failed_read,
    )
    return Decided(action=retry)


def _lookup_retry(
    op: Operation, ctx: StepContext, signal: HttpSignal, now: datetime, u: float
) -> Retry:
    asked = signal.retry_after.seconds if signal.retry_after.valid else None
    wait = retry_wait(
        asked,
        ctx.contract.poll,
        attempt=op.create_attempts,
        u=u,
        now=now,
        deadline=earlier(op.create_deadline, op.business_deadline),
    )
    failed_read = signal.kind in (SignalKind.transport, SignalKind.server_error)
    return Retry(
        wait=wait,
        event=EventKind.create_ambiguous,
        to=None,
        detail=f"lookup unreadable ({signal.transport_failure or signal.kind.value}): ask again",
        counts_transport_failure=failed_read,
    )


# --- reconcile --------------------------------------------------------------------------


def before_reconcile(op: Operation, ctx: StepContext, now: datetime) -> Decided:
    early = not_yet(op, now)
    if early is not None:
        return early
    spec = ctx.contract.reconciliation
    if spec.path is ReconciliationPath.none:
        detail = (
            "create outcome unknown and the contract has no reconciliation "
            "path: at-most-once cannot be proven"
        )
        return Decided(action=escalate(op.state, EscalationReason.unknown_state, detail))
    if now >= earlier(op.create_deadline, op.business_deadline):
        # A same-token create could still start the job the business no longer wants.
        which = "business" if passed(op.business_deadline, now) else "create"
        detail = f"{which} deadline passed while reconciling"
        return Decided(action=escalate(op.state, EscalationReason.deadline_exceeded, detail))
    if spec.path is ReconciliationPath.lookup_by_reference and spec.lookup_path:
        send = _create_send(ctx, op, EventKind.reconcile_sent, cause=spec.path.value, now=now)
        return Decided(action=replace(send, request=lookup_request(ctx, op, spec.lookup_path)))
    return Decided(
        action=_create_send(ctx, op, EventKind.reconcile_sent, cause=spec.path.value, now=now)
    )


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
        problem = job_id_problem(contract, found)
        if problem is not None:
            action = escalate(op.state, EscalationReason.contract_violation, problem)
            return Decided(action=action, answered="lookup response")
        url = resolve_url(ctx.base_url, job_path(contract.status.path, found))
        accepted = accept(op, ctx, found, url, EventKind.reconciled, now, raw)
        return replace(accepted, answered="lookup response")
    if signal.kind in (SignalKind.unauthorized, SignalKind.forbidden):
        detail = f"HTTP {signal.status_code} on the reconciliation lookup"
        denied = escalate(op.state, EscalationReason.authorization_denied, detail)
        return Decided(action=denied, answered="lookup response")
    if signal.kind not in (SignalKind.ok, SignalKind.not_found):
        # A lookup we could not read is no evidence that the job is absent: ask again
        # later (after Retry-After), never resend the create on a guess.
        return Decided(action=_lookup_retry(op, ctx, signal, now, u), answered="lookup response")
    # Nothing under our token: resending the create with the same token is safe.
    cause = f"lookup found no job under our token (http {signal.status_code or '-'})"
    send = _create_send(ctx, op, EventKind.reconcile_sent, cause=cause, now=now)
    return Decided(action=send, answered="lookup response")
