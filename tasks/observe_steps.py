"""Poll (observing and cancel confirmation), cancel and collect.

Each step: check the guard before any request, commit the request counter,
send exactly one request, then record the observation and the decision in
one fenced transaction.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from jobwarden.models.contract import ProviderContract
from jobwarden.models.decisions import (
    Collect,
    Decision,
    Escalate,
    EscalationReason,
    Finish,
    NotYet,
    Phase,
    PollView,
    Wait,
    decide_after_status,
    guard_before_status_request,
)
from jobwarden.models.history import EventDraft, EventKind
from jobwarden.models.pointers import resolve_pointer
from jobwarden.models.signals import SignalKind, classify_http, read_status
from jobwarden.models.states import OperationState as S
from jobwarden.models.tables import OperationRow
from jobwarden.tasks import faults
from jobwarden.tasks.recording import (
    Next,
    escalation_event,
    excerpt,
    transition,
    wait_event,
    wake_changes,
    write,
)
from jobwarden.tasks.runtime import Runtime, utcnow


def poll_view(row: OperationRow) -> PollView:
    cancelling = row.state == S.cancelling.value
    deadline = row.cancel_deadline if cancelling and row.cancel_deadline else row.result_deadline
    return PollView(
        phase=Phase.cancelling if cancelling else Phase.observing,
        deadline=deadline,
        accepted_at=row.accepted_at or row.created_at,
        status_requests_used=row.status_requests_used,
        max_status_requests=row.max_status_requests,
        transport_failures_used=row.transport_failures_used,
        max_transport_failures=row.max_transport_failures,
        consecutive_rate_limited=row.consecutive_rate_limited,
        poll_attempt=row.poll_attempt,
        next_poll_at=row.next_poll_at,
    )


def _in_phase(row: OperationRow, action: Escalate) -> Escalate:
    """While cancelling, every stop is cancellation_unconfirmed; the reason says why."""
    if row.state == S.cancelling.value and action.state is S.escalated:
        return Escalate(
            reason=action.reason, detail=action.detail, state=S.cancellation_unconfirmed
        )
    return action


def _escalation_changes(action: Escalate) -> dict[str, Any]:
    return {
        "state": action.state.value,
        "escalation_reason": action.reason.value,
        "escalation_detail": action.detail,
        "next_poll_at": None,
        "dispatched_at": None,
    }


def _stop(
    rt: Runtime,
    row: OperationRow,
    action: Escalate,
    now: datetime,
    actor: str,
    changes: dict[str, Any] | None = None,
    events: list[EventDraft] | None = None,
) -> Next:
    """Stop automation with the action's reason, after any observation being recorded."""
    action = _in_phase(row, action)
    ev = escalation_event(
        row, action.state.value, action.reason.value, action.detail, actor=actor, now=now
    )
    update = {**(changes or {}), **_escalation_changes(action)}
    row = write(rt, row, update, [*(events or []), ev], now)
    return Next(row.state, None)


def poll_step(rt: Runtime, row: OperationRow) -> Next:
    contract = rt.contract(row.provider)
    actor = f"worker:{rt.settings.worker_name}"
    now = utcnow()
    view = poll_view(row)
    guard = guard_before_status_request(view, now=now)
    if isinstance(guard, NotYet):
        # A duplicate or early message: the legitimate one (or the sweeper) comes later.
        return Next(row.state, None)
    if isinstance(guard, Escalate):
        if row.state == S.accepted.value:
            # Stops are taken from observing; an operation whose bounds ran out before its
            # first poll (a short deadline, a backlog) passes through it on the way.
            row = transition(
                rt,
                row,
                S.observing.value,
                kind=EventKind.decision,
                actor=actor,
                now=now,
                cause="bounds spent before the first status request",
            )
        return _stop(rt, row, guard, now, actor)
    if row.status_url is None:
        return _stop(
            rt,
            row,
            Escalate(
                reason=EscalationReason.contract_violation,
                detail="no status URL recorded",
                state=S.escalated,
            ),
            now,
            actor,
        )
    claim: dict[str, Any] = {"status_requests_used": row.status_requests_used + 1}
    if row.state == S.accepted.value:
        claim["state"] = S.observing.value
    row = write(
        rt,
        row,
        claim,
        [
            EventDraft(
                kind=EventKind.poll_sent,
                actor=actor,
                at=now,
                from_state=row.state if "state" in claim else None,
                to_state=claim.get("state"),
                excerpt={"request": row.status_requests_used + 1, "of": row.max_status_requests},
            )
        ],
        now,
    )
    faults.fault_point(rt.redis, rt.settings.key_prefix, "after_poll_claim", row.idempotency_key)
    # Same guard, same pre-claim counters; only the clock has moved.
    late = guard_before_status_request(replace(view, next_poll_at=None), now=utcnow())
    if isinstance(late, Escalate):
        # The claim took long enough for the deadline to pass: the reservation stays unused,
        # and the history says so next to its poll_sent.
        unused = replace(late, detail=f"{late.detail}; reserved request not sent")
        return _stop(rt, row, unused, utcnow(), actor)
    status_url = row.status_url or ""
    raw = rt.http.send(contract, contract.status.method, status_url, trace_id=row.trace_id)
    faults.fault_point(rt.redis, rt.settings.key_prefix, "after_poll_response", row.idempotency_key)
    now = utcnow()
    view = poll_view(row)
    signal = classify_http(raw.observation, now=now)
    reading = None
    body = rt.http.status_body(contract, raw.observation.body)
    if signal.kind in (SignalKind.ok, SignalKind.accepted) and isinstance(body, dict):
        reading = read_status(contract, body, now=now, deadline=view.deadline)
    grace = timedelta(seconds=contract.status.not_found_grace_seconds)
    not_found_allowed = now < view.accepted_at + grace
    decision = decide_after_status(
        view,
        contract.poll,
        signal,
        reading,
        now=now,
        u=rt.jitter(),
        not_found_allowed=not_found_allowed,
    )
    observed = EventDraft(
        kind=EventKind.observed,
        actor=actor,
        at=now,
        http_status=raw.observation.status_code,
        provider_request_id=raw.provider_request_id,
        excerpt=excerpt(
            raw,
            remote_state=reading.raw_state if reading else None,
            remote_status=reading.remote_status.value if reading else None,
            progress=reading.progress if reading else None,
            signal=signal.kind.value,
            contradiction=reading.contradiction if reading else None,
        ),
    )
    changes: dict[str, Any] = {
        "transport_failures_used": decision.transport_failures_used,
        "consecutive_rate_limited": decision.consecutive_rate_limited,
        "poll_attempt": decision.poll_attempt,
        "last_http_status": raw.observation.status_code,
    }
    if reading is not None:
        changes["last_remote_state"] = (reading.raw_state or "")[:200] or None
        if reading.progress is not None:
            changes["progress"] = reading.progress
    return _apply(rt, contract, row, decision, changes, [observed], body, now, actor)


def _apply(
    rt: Runtime,
    contract: ProviderContract,
    row: OperationRow,
    decision: Decision,
    changes: dict[str, Any],
    events: list[EventDraft],
    body: object,
    now: datetime,
    actor: str,
) -> Next:
    action = decision.action
    if isinstance(action, Wait):
        events.append(wait_event(action, actor=actor, now=now, cause="wait"))
        row = write(rt, row, {**changes, **wake_changes(rt, action.until, now)}, events, now)
        return Next(row.state, action.until)
    if isinstance(action, Collect):
        expected: dict[str, Any] = {}
        spec = contract.result
        if spec is not None and spec.checksum_pointer:
            sha = resolve_pointer(body, spec.checksum_pointer)
            expected["expected_sha256"] = sha if isinstance(sha, str) else None
        if spec is not None and spec.fetch == "inline" and contract.status.result_ref_pointer:
            inline = resolve_pointer(body, contract.status.result_ref_pointer)
            expected["inline"] = inline if isinstance(inline, dict | list) else None
        events.append(
            EventDraft(
                kind=EventKind.decision,
                actor=actor,
                at=now,
                from_state=row.state,
                to_state=S.result_collecting.value,
                cause="remote job finished; collect the result",
            )
        )
        row = write(
            rt,
            row,
            {
                **changes,
                "state": S.result_collecting.value,
                "result_reference": action.result_ref,
                "validation_summary": {"expected": expected},
                **wake_changes(rt, now, now),
            },
            events,
            now,
        )
        return Next(row.state, now)
    if isinstance(action, Finish):
        kind = EventKind.cancel_confirmed if action.state is S.cancelled else EventKind.decision
        events.append(
            EventDraft(
                kind=kind,
                actor=actor,
                at=now,
                from_state=row.state,
                to_state=action.state.value,
                cause=action.reason,
            )
        )
        row = write(
            rt,
            row,
            {**changes, "state": action.state.value, **wake_changes(rt, None, now)},
            events,
            now,
        )
        return Next(row.state, None)
    if isinstance(action, Escalate):
        return _stop(rt, row, action, now, actor, changes, events)
    return Next(row.state, None)
