"""Create and reconcile: the only places a create request leaves the process.

Every send carries the operation's one provider token. The counter and a
`create_sent` event are committed before the request, so a crash between send
and record is visible afterwards and treated as an ambiguous create.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from jobwarden.models.backoff import backoff_delay
from jobwarden.models.contract import JobLocator, ProviderContract, TokenPlacement
from jobwarden.models.db import transaction
from jobwarden.models.decisions import (
    CreateOutcomeKind,
    EscalationReason,
    Phase,
    PollView,
    decide_after_create,
    first_poll,
)
from jobwarden.models.history import EventDraft, EventKind
from jobwarden.models.pointers import resolve_pointer
from jobwarden.models.signals import classify_http
from jobwarden.models.states import OperationState as S
from jobwarden.models.tables import EventRow, OperationRow
from jobwarden.tasks import faults
from jobwarden.tasks.provider_edge import RawResponse, resolve_url
from jobwarden.tasks.recording import (
    Next,
    escalation,
    excerpt,
    transition,
    wait_event,
    wake_changes,
    write,
)
from jobwarden.tasks.runtime import Runtime, utcnow


def create_request(contract: ProviderContract, row: OperationRow) -> tuple[dict[str, str], Any]:
    body: Any = dict(row.command)
    if contract.create.body_template == "wrapped":
        body = {"command": body}
    headers: dict[str, str] = {}
    if contract.create.token_placement is TokenPlacement.header:
        headers[contract.create.token_name] = row.provider_token
    else:
        body[contract.create.token_name] = row.provider_token
    return headers, body


def send_create(rt: Runtime, contract: ProviderContract, row: OperationRow) -> RawResponse:
    headers, body = create_request(contract, row)
    return rt.http.send(
        contract,
        contract.create.method,
        resolve_url(contract, contract.create.path),
        trace_id=row.trace_id,
        headers=headers,
        json_body=body,
    )


def _job_locator(contract: ProviderContract, raw: RawResponse) -> tuple[str | None, str | None]:
    """Job id and status URL exactly where the contract says; never a guessed URL."""
    obs = raw.observation
    job_id: str | None = None
    if contract.create.job_id_pointer is not None and isinstance(obs.body, dict):
        found = resolve_pointer(obs.body, contract.create.job_id_pointer)
        if isinstance(found, str | int) and not isinstance(found, bool) and str(found):
            job_id = str(found)
    status_url: str | None = None
    header = {
        JobLocator.location: "location",
        JobLocator.operation_location: "operation-location",
    }.get(contract.create.job_locator)
    if header is not None:
        status_url = obs.headers.get(header)
        if status_url and job_id is None:
            job_id = status_url
    elif job_id is not None and contract.status.path is not None:
        status_url = contract.status.path.replace("{job_id}", job_id)
    return job_id, status_url


def first_poll_view(row: OperationRow, accepted_at: datetime) -> PollView:
    return PollView(
        phase=Phase.observing,
        deadline=row.result_deadline,
        accepted_at=accepted_at,
        status_requests_used=row.status_requests_used,
        max_status_requests=row.max_status_requests,
        transport_failures_used=row.transport_failures_used,
        max_transport_failures=row.max_transport_failures,
        consecutive_rate_limited=row.consecutive_rate_limited,
        poll_attempt=row.poll_attempt,
        next_poll_at=None,
    )


def _unsent_attempt_was_lost(rt: Runtime, row: OperationRow) -> bool:
    """True when a committed create_sent has no recorded outcome (the sender died)."""
    with transaction(rt.settings.database_url) as session:
        last_kind = session.scalar(
            select(EventRow.kind)
            .where(EventRow.operation_id == row.operation_id)
            .order_by(EventRow.seq.desc())
            .limit(1)
        )
    return last_kind in (EventKind.create_sent.value, EventKind.reconcile_sent.value)


def create_step(rt: Runtime, row: OperationRow) -> Next:
    contract = rt.contract(row.provider)
    actor = f"worker:{rt.settings.worker_name}"
    now = utcnow()
    if row.create_attempts > 0 and _unsent_attempt_was_lost(rt, row):
        row = transition(
            rt,
            row,
            S.create_unknown.value,
            kind=EventKind.create_ambiguous,
            actor=actor,
            now=now,
            cause="create_sent_without_recorded_outcome",
            wake_at=now,
        )
        return Next(row.state, now)
    give_up = None
    if row.approval_expires_at is not None and now >= row.approval_expires_at:
        give_up = "approval_expired before the create was sent"
    elif now >= row.create_deadline:
        give_up = "create_deadline_exceeded"
    if give_up is not None:
        # Nothing is in flight (the check above): failing here cannot orphan a remote job.
        row = transition(
            rt,
            row,
            S.failed.value,
            kind=EventKind.decision,
            actor=actor,
            now=now,
            cause=give_up,
            wake_at=None,
        )
        return Next(row.state, None)
    row = write(
        rt,
        row,
        {"create_attempts": row.create_attempts + 1},
        [
            EventDraft(
                kind=EventKind.create_sent,
                actor=actor,
                at=now,
                excerpt={"attempt": row.create_attempts + 1},
            )
        ],
        now,
    )
    faults.fault_point(
        rt.redis, rt.settings.key_prefix, "after_create_sent_commit", row.idempotency_key
    )
    raw = send_create(rt, contract, row)
    faults.fault_point(
        rt.redis, rt.settings.key_prefix, "after_create_response", row.idempotency_key
    )
    return record_create_outcome(rt, contract, row, raw, reconciling=False)


def record_create_outcome(
    rt: Runtime,
    contract: ProviderContract,
    row: OperationRow,
    raw: RawResponse,
    *,
    reconciling: bool,
) -> Next:
    actor = f"worker:{rt.settings.worker_name}"
    now = utcnow()
    signal = classify_http(raw.observation, now=now)
    job_id, status_url = _job_locator(contract, raw)
    outcome = decide_after_create(signal, job_id=job_id, known_job_id=row.remote_job_id)
    replayed = raw.observation.headers.get("idempotent-replayed", "").lower() == "true"
    ex = excerpt(raw, job_id=job_id)
    http_status = raw.observation.status_code
    if outcome.kind is CreateOutcomeKind.accepted and status_url is not None:
        kind = (
            EventKind.reconciled
            if reconciling
            else (EventKind.create_replayed if replayed else EventKind.create_accepted)
        )
        accepted = EventDraft(
            kind=kind,
            actor=actor,
            at=now,
            from_state=row.state,
            to_state=S.accepted.value,
            http_status=http_status,
            provider_request_id=raw.provider_request_id,
            excerpt=ex,
        )
        wait = first_poll(first_poll_view(row, now), contract.poll, now=now)
        decision = wait_event(wait, actor=actor, now=now, cause="first_poll")
        row = write(
            rt,
            row,
            {
                "state": S.accepted.value,
                "remote_job_id": job_id,
                "status_url": resolve_url(contract, status_url),
                "accepted_at": now,
                "last_http_status": http_status,
                **wake_changes(rt, wait.until, now),
            },
            [accepted, decision],
            now,
        )
        faults.fault_point(
            rt.redis, rt.settings.key_prefix, "after_accept_commit", row.idempotency_key
        )
        return Next(row.state, wait.until)
    if outcome.kind is CreateOutcomeKind.contract_violation or (
        outcome.kind is CreateOutcomeKind.accepted and status_url is None
    ):
        detail = (
            outcome.detail
            if outcome.kind is CreateOutcomeKind.contract_violation
            else ("accepted without a status location the contract names")
        )
        observed = EventDraft(
            kind=EventKind.observed,
            actor=actor,
            at=now,
            http_status=http_status,
            excerpt=ex,
            cause=detail,
        )
        changes, evs = escalation(EscalationReason.contract_violation, detail, actor, row, now)
        if row.remote_job_id is None and job_id is not None:
            # A remote job may exist: keep its id for the human who reconciles it.
            changes["remote_job_id"] = job_id
        row = write(rt, row, {**changes, "last_http_status": http_status}, [observed, *evs], now)
        return Next(row.state, None)
    if outcome.kind is CreateOutcomeKind.authorization_denied:
        observed = EventDraft(
            kind=EventKind.observed, actor=actor, at=now, http_status=http_status, excerpt=ex
        )
        changes, evs = escalation(
            EscalationReason.authorization_denied, f"HTTP {http_status} on create", actor, row, now
        )
        row = write(rt, row, {**changes, "last_http_status": http_status}, [observed, *evs], now)
        return Next(row.state, None)
    if outcome.kind is CreateOutcomeKind.refused:
        ev = EventDraft(
            kind=EventKind.create_refused,
            actor=actor,
            at=now,
            from_state=row.state,
            to_state=S.failed.value,
            http_status=http_status,
            excerpt=ex,
            cause=outcome.detail,
        )
        row = write(
            rt,
            row,
            {
                "state": S.failed.value,
                "last_http_status": http_status,
                **wake_changes(rt, None, now),
            },
            [ev],
            now,
        )
        return Next(row.state, None)
    attempts = row.create_attempts
    if attempts >= contract.limits.max_create_attempts:
        reason = (
            EscalationReason.rate_limited
            if outcome.kind is CreateOutcomeKind.rate_limited
            else EscalationReason.provider_failure
        )
        observed = EventDraft(
            kind=EventKind.observed, actor=actor, at=now, http_status=http_status, excerpt=ex
        )
        target = S.escalated
        if row.state == S.create_pending.value and outcome.kind is CreateOutcomeKind.ambiguous:
            # Ambiguity must be reconciled before anyone may give up on it.
            target = S.create_unknown
        if target is S.create_unknown:
            row = write(
                rt,
                row,
                {"state": target.value, **wake_changes(rt, now, now)},
                [
                    observed,
                    EventDraft(
                        kind=EventKind.create_ambiguous,
                        actor=actor,
                        at=now,
                        from_state=row.state,
                        to_state=target.value,
                        cause=outcome.detail,
                    ),
                ],
                now,
            )
            return Next(row.state, now)
        changes, evs = escalation(
            reason, f"{attempts} create attempts: {outcome.detail}", actor, row, now
        )
        row = write(rt, row, {**changes, "last_http_status": http_status}, [observed, *evs], now)
        return Next(row.state, None)
    delay = outcome.retry_after
    source = "provider_retry_after"
    if delay is None:
        delay = backoff_delay(
            attempt=attempts,
            base=contract.poll.base_seconds,
            maximum=contract.poll.max_seconds,
            jitter_floor=contract.poll.jitter_floor,
            u=rt.jitter(),
        )
        source = "local_backoff"
    at = min(now + timedelta(seconds=delay), row.create_deadline)
    if outcome.kind is CreateOutcomeKind.rate_limited:
        # A 429 means the provider did not take the request: same token, later.
        ev = EventDraft(
            kind=EventKind.create_refused,
            actor=actor,
            at=now,
            http_status=http_status,
            excerpt={**ex, "next_attempt_at": at.isoformat()},
            cause="rate_limited",
            delay_source=source,
        )
        row = write(
            rt, row, {"last_http_status": http_status, **wake_changes(rt, at, now)}, [ev], now
        )
        return Next(row.state, at)
    # Ambiguous: the provider may have created the job; never a fresh token.
    to_state = S.reconciling if reconciling else S.create_unknown
    ev = EventDraft(
        kind=EventKind.create_ambiguous,
        actor=actor,
        at=now,
        from_state=row.state,
        to_state=to_state.value if to_state.value != row.state else None,
        http_status=http_status,
        excerpt={**ex, "next_attempt_at": at.isoformat()},
        cause=outcome.detail,
        delay_source=source,
    )
    update: dict[str, Any] = {"last_http_status": http_status, **wake_changes(rt, at, now)}
    if to_state.value != row.state:
        update["state"] = to_state.value
    if raw.observation.transport_failure is not None or (http_status or 0) >= 500:
        update["transport_failures_used"] = row.transport_failures_used + 1
    row = write(rt, row, update, [ev], now)
    return Next(row.state, at)
