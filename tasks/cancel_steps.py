"""Cancel: record the one cancel request, send it, then confirm by status reads.

`cancel_requested` is our fact; `cancelled` is written only when the provider
reports it (by the poll step in the cancelling phase).
"""

from __future__ import annotations

from datetime import timedelta

from jobwarden.models.decisions import Escalate, EscalationReason
from jobwarden.models.history import EventDraft, EventKind
from jobwarden.models.states import OperationState as S
from jobwarden.models.tables import OperationRow
from jobwarden.tasks import faults
from jobwarden.tasks.observe_steps import _stop
from jobwarden.tasks.provider_edge import resolve_url
from jobwarden.tasks.recording import Next, excerpt, transition, wake_changes, write
from jobwarden.tasks.runtime import Runtime, utcnow


def cancel_step(rt: Runtime, row: OperationRow) -> Next:
    """Send the one cancel request, then confirm it by status reads (cancelling phase)."""
    contract = rt.contract(row.provider)
    actor = f"worker:{rt.settings.worker_name}"
    now = utcnow()
    if contract.cancel is None or row.remote_job_id is None:
        action = Escalate(
            reason=EscalationReason.cancellation_unconfirmed,
            detail="the contract has no cancel endpoint",
            state=S.cancellation_unconfirmed,
        )
        row = transition(
            rt,
            row,
            S.cancelling.value,
            kind=EventKind.decision,
            actor=actor,
            now=now,
            cause="no cancel endpoint",
        )
        return _stop(rt, row, action, now, actor)
    first = now + timedelta(seconds=contract.poll.initial_delay_seconds)
    deadline = row.cancel_deadline or now + timedelta(
        seconds=contract.limits.cancel_deadline_seconds
    )
    row = write(
        rt,
        row,
        {
            "state": S.cancelling.value,
            "cancel_deadline": deadline,
            **wake_changes(rt, min(first, deadline), now),
        },
        [
            EventDraft(
                kind=EventKind.cancel_sent,
                actor=actor,
                at=now,
                from_state=row.state,
                to_state=S.cancelling.value,
            )
        ],
        now,
    )
    faults.fault_point(rt.redis, rt.settings.key_prefix, "after_cancel_claim", row.idempotency_key)
    job_id = row.remote_job_id or ""
    url = resolve_url(contract, contract.cancel.path.replace("{job_id}", job_id))
    raw = rt.http.send(contract, contract.cancel.method, url, trace_id=row.trace_id)
    faults.fault_point(
        rt.redis, rt.settings.key_prefix, "after_cancel_response", row.idempotency_key
    )
    now = utcnow()
    row = write(
        rt,
        row,
        {},
        [
            EventDraft(
                kind=EventKind.observed,
                actor=actor,
                at=now,
                http_status=raw.observation.status_code,
                provider_request_id=raw.provider_request_id,
                cause="cancel response",
                excerpt=excerpt(raw),
            )
        ],
        now,
    )
    if raw.observation.status_code in (401, 403):
        # Confirmation polls with the same credential cannot succeed: stop now, say why.
        denied = Escalate(
            reason=EscalationReason.authorization_denied,
            detail=f"HTTP {raw.observation.status_code} on cancel",
            state=S.cancellation_unconfirmed,
        )
        return _stop(rt, row, denied, now, actor)
    return Next(row.state, row.next_poll_at)
