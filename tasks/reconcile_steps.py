"""Reconcile: find out what became of a create whose outcome is unknown.

Same-token retry resends the create with the operation's one token (the
provider replays); lookup-by-reference asks for the job under that token; with
no path at all, at-most-once cannot be proven and the operation escalates.
"""

from __future__ import annotations

from jobwarden.models.contract import ProviderContract, ReconciliationPath
from jobwarden.models.decisions import EscalationReason, first_poll
from jobwarden.models.history import EventDraft, EventKind
from jobwarden.models.pointers import resolve_pointer
from jobwarden.models.states import OperationState as S
from jobwarden.models.tables import OperationRow
from jobwarden.tasks import faults
from jobwarden.tasks.create_steps import first_poll_view, record_create_outcome, send_create
from jobwarden.tasks.provider_edge import RawResponse, resolve_url
from jobwarden.tasks.recording import Next, escalation, excerpt, transition, wake_changes, write
from jobwarden.tasks.runtime import Runtime, utcnow


def reconcile_step(rt: Runtime, row: OperationRow) -> Next:
    contract = rt.contract(row.provider)
    actor = f"worker:{rt.settings.worker_name}"
    now = utcnow()
    if row.state == S.create_unknown.value:
        row = transition(
            rt,
            row,
            S.reconciling.value,
            kind=EventKind.decision,
            actor=actor,
            now=now,
            cause=f"reconcile via {contract.reconciliation.path.value}",
        )
    path = contract.reconciliation.path
    if path is ReconciliationPath.none:
        changes, evs = escalation(
            EscalationReason.unknown_state,
            "create outcome unknown and the contract has no reconciliation "
            "path: at-most-once cannot be proven",
            actor,
            row,
            now,
        )
        row = write(rt, row, changes, evs, now)
        return Next(row.state, None)
    if now >= row.create_deadline:
        changes, evs = escalation(
            EscalationReason.deadline_exceeded,
            "create deadline passed while reconciling",
            actor,
            row,
            now,
        )
        row = write(rt, row, changes, evs, now)
        return Next(row.state, None)
    row = write(
        rt,
        row,
        {"create_attempts": row.create_attempts + 1},
        [
            EventDraft(
                kind=EventKind.reconcile_sent,
                actor=actor,
                at=now,
                cause=path.value,
                excerpt={"attempt": row.create_attempts + 1},
            )
        ],
        now,
    )
    faults.fault_point(
        rt.redis, rt.settings.key_prefix, "after_reconcile_claim", row.idempotency_key
    )
    if path is ReconciliationPath.lookup_by_reference and contract.reconciliation.lookup_path:
        lookup = contract.reconciliation.lookup_path.replace("{token}", row.provider_token)
        raw = rt.http.send(contract, "GET", resolve_url(contract, lookup), trace_id=row.trace_id)
        pointer = contract.reconciliation.lookup_job_id_pointer or "/data/0/id"
        found = (
            resolve_pointer(raw.observation.body, pointer)
            if raw.observation.status_code == 200
            else None
        )
        if not isinstance(found, str):
            # Nothing under our token: resending the create with the same token is safe.
            raw = send_create(rt, contract, row)
        else:
            return _accept_from_lookup(rt, contract, row, raw, found)
    else:
        raw = send_create(rt, contract, row)
    faults.fault_point(
        rt.redis, rt.settings.key_prefix, "after_reconcile_response", row.idempotency_key
    )
    return record_create_outcome(rt, contract, row, raw, reconciling=True)


def _accept_from_lookup(
    rt: Runtime, contract: ProviderContract, row: OperationRow, raw: RawResponse, job_id: str
) -> Next:
    actor = f"worker:{rt.settings.worker_name}"
    now = utcnow()
    if contract.status.path is None:
        changes, evs = escalation(
            EscalationReason.contract_violation,
            "lookup found a job but the contract has no status path",
            actor,
            row,
            now,
        )
        row = write(rt, row, changes, evs, now)
        return Next(row.state, None)
    wait = first_poll(first_poll_view(row, now), contract.poll, now=now)
    row = write(
        rt,
        row,
        {
            "state": S.accepted.value,
            "remote_job_id": job_id,
            "status_url": resolve_url(contract, contract.status.path.replace("{job_id}", job_id)),
            "accepted_at": now,
            **wake_changes(rt, wait.until, now),
        },
        [
            EventDraft(
                kind=EventKind.reconciled,
                actor=actor,
                at=now,
                from_state=row.state,
                to_state=S.accepted.value,
                http_status=raw.observation.status_code,
                excerpt=excerpt(raw, job_id=job_id),
            )
        ],
        now,
    )
    return Next(row.state, wait.until)
