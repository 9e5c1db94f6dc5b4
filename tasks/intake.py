"""Intake: the one function behind the Python call, the Celery task and the HTTP API.

The key is claimed atomically (unique tenant + key) before anything else
happens; the intent row is committed before any message is published.
"""

from __future__ import annotations

import contextlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import OperationalError

from models import store
from models.db import transaction
from models.decisions import EscalationReason
from models.errors import InvalidSubmissionError, RefusedInputError, StaleVersionError
from models.escalation import Bounds, EscalationView, Option, OptionKind, apply_option, options_for
from models.fingerprint import request_fingerprint
from models.history import GENESIS_HASH, EventDraft, EventKind, chain
from models.states import OperationState as S
from models.tables import EventRow, OperationRow
from tasks.runtime import Runtime, current, utcnow

MAX_KEY = 255


class SubmitOutcome(StrEnum):
    created = "created"  # a new operation was recorded
    replayed = "replayed"  # same key, same fingerprint: the existing operation
    in_progress = "in_progress"  # same key is being recorded by a concurrent submission
    conflict = "conflict"  # same key, different fingerprint: nothing touched
    duplicate_event = "duplicate_event"  # the source event already has an operation


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitResult:
    outcome: SubmitOutcome
    operation_id: str | None
    state: str | None
    fingerprint: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "operation_id": self.operation_id,
            "state": self.state,
            "fingerprint": self.fingerprint,
        }


def _validate(tenant: str, provider: str, key: str, requested_by: str, rt: Runtime) -> None:
    for name, value in (
        ("tenant", tenant),
        ("idempotency_key", key),
        ("requested_by", requested_by),
    ):
        if not isinstance(value, str) or not value.strip():
            raise InvalidSubmissionError(f"{name} is required")
        if len(value) > MAX_KEY:
            raise InvalidSubmissionError(f"{name} is longer than {MAX_KEY} characters")
    if provider not in rt.contracts:
        known = ", ".join(sorted(rt.contracts))
        raise InvalidSubmissionError(f"unknown provider {provider!r}; known: {known}")


def submit_operation(
    *,
    tenant: str,
    provider: str,
    idempotency_key: str,
    command: dict[str, Any],
    requested_by: str,
    source_event_id: str | None = None,
    method: str = "POST",
    route: str | None = None,
    max_status_requests: int | None = None,
    result_deadline_seconds: float | None = None,
    max_transport_failures: int | None = None,
    cancel_deadline_seconds: float | None = None,
    runtime: Runtime | None = None,
) -> SubmitResult:
    """Record an operation's intent and hand it to the workers.

    Raises InvalidSubmissionError for bad input (nothing is recorded).
    """
    rt = runtime or current()
    _validate(tenant, provider, idempotency_key, requested_by, rt)
    contract = rt.contract(provider)
    route = route or f"/providers/{provider}/operations"
    fingerprint = request_fingerprint(
        method=method, route=route, tenant=tenant, provider=provider, command=command
    )
    for name, value in (
        ("max_status_requests", max_status_requests),
        ("max_transport_failures", max_transport_failures),
        ("result_deadline_seconds", result_deadline_seconds),
        ("cancel_deadline_seconds", cancel_deadline_seconds),
    ):
        if value is not None and (isinstance(value, bool) or not value > 0):
            raise InvalidSubmissionError(f"{name} must be positive")
    limits = contract.limits
    now = utcnow()
    op_id = uuid.uuid4()
    state = S.awaiting_approval if contract.requires_approval else S.create_pending
    first = [
        EventDraft(
            kind=EventKind.intent_recorded,
            actor=f"submitter:{requested_by}",
            at=now,
            to_state=state.value,
            excerpt={
                "fingerprint": fingerprint,
                "idempotency_key": idempotency_key,
                "source_event_id": source_event_id,
            },
        )
    ]
    chained = chain(str(op_id), first, last_seq=0, last_hash=GENESIS_HASH)
    values = {
        "operation_id": op_id,
        "tenant": tenant,
        "provider": provider,
        "idempotency_key": idempotency_key,
        "source_event_id": source_event_id,
        # Ours, generated with the row, never the caller's key and never regenerated.
        "provider_token": f"jw-{op_id.hex}",
        "request_fingerprint": fingerprint,
        "method": method.upper(),
        "route": route,
        "command": command,
        "state": state.value,
        "version": 1,
        "trace_id": secrets.token_hex(16),
        "requested_by": requested_by,
        "created_at": now,
        "create_deadline": now + timedelta(seconds=limits.create_deadline_seconds),
        "result_deadline": now
        + timedelta(seconds=result_deadline_seconds or limits.result_deadline_seconds),
        "cancel_deadline": None,
        "next_poll_at": now if state is S.create_pending else None,
        "dispatched_at": now if state is S.create_pending else None,
        "create_attempts": 0,
        "status_requests_used": 0,
        "max_status_requests": max_status_requests or limits.max_status_requests,
        "transport_failures_used": 0,
        "max_transport_failures": max_transport_failures or limits.max_transport_failures,
        "consecutive_rate_limited": 0,
        "poll_attempt": 0,
        "event_count": 1,
        "last_event_hash": chained[-1].hash,
        "updated_at": now,
    }
    if cancel_deadline_seconds is not None:
        values["validation_summary"] = {"cancel_deadline_seconds": cancel_deadline_seconds}
    try:
        with transaction(rt.settings.database_url) as session:
            # A concurrent submission holding the key longer than this is "in progress".
            session.execute(text("SET LOCAL lock_timeout = '5s'"))
            inserted = session.scalar(
                pg_insert(OperationRow)
                .values(**values)
                .on_conflict_do_nothing()
                .returning(OperationRow.operation_id)
            )
            if inserted is not None:
                ev = chained[0]
                session.add(
                    EventRow(
                        operation_id=op_id,
                        seq=1,
                        actor=ev.draft.actor,
                        at=ev.draft.at,
                        from_state=None,
                        to_state=ev.draft.to_state,
                        kind=ev.draft.kind.value,
                        excerpt=ev.draft.excerpt,
                        prev_hash=ev.prev_hash,
                        hash=ev.hash,
                    )
                )
                result = SubmitResult(
                    outcome=SubmitOutcome.created,
                    operation_id=str(op_id),
                    state=state.value,
                    fingerprint=fingerprint,
                )
            else:
                result = _existing(
                    session, tenant, provider, idempotency_key, source_event_id, fingerprint
                )
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) == "55P03":  # lock_not_available
            return SubmitResult(
                outcome=SubmitOutcome.in_progress,
                operation_id=None,
                state=None,
                fingerprint=fingerprint,
            )
        raise
    if result.outcome is SubmitOutcome.created and state is S.create_pending:
        from tasks.pipeline import enqueue

        enqueue(rt, op_id, state.value)
    return result


def _existing(
    session: Any,
    tenant: str,
    provider: str,
    key: str,
    source_event_id: str | None,
    fingerprint: str,
) -> SubmitResult:
    row = session.scalar(
        select(OperationRow)
        .where(OperationRow.tenant == tenant)
        .where(OperationRow.idempotency_key == key)
    )
    if row is not None:
        # Conflict is checked before anything else, and the stored operation is not touched.
        outcome = (
            SubmitOutcome.replayed
            if row.request_fingerprint == fingerprint
            else SubmitOutcome.conflict
        )
        return SubmitResult(
            outcome=outcome,
            operation_id=str(row.operation_id),
            state=row.state,
            fingerprint=fingerprint,
        )
    if source_event_id is not None:
        row = session.scalar(
            select(OperationRow)
            .where(OperationRow.tenant == tenant)
            .where(OperationRow.provider == provider)
            .where(OperationRow.source_event_id == source_event_id)
        )
        if row is not None:
            return SubmitResult(
                outcome=SubmitOutcome.duplicate_event,
                operation_id=str(row.operation_id),
                state=row.state,
                fingerprint=fingerprint,
            )
    return SubmitResult(
        outcome=SubmitOutcome.in_progress, operation_id=None, state=None, fingerprint=fingerprint
    )


CANCELLABLE = {S.accepted.value, S.observing.value, S.escalated.value, S.result_timed_out.value}


def request_cancel(
    operation_id: str, requested_by: str, reason: str, runtime: Runtime | None = None
) -> str:
    """Record the intent to cancel; the owner sends the one cancel request.

    Returns the operation's state afterwards. Raises RefusedInputError when
    the operation cannot be cancelled from its current state.
    """
    rt = runtime or current()
    op_id = uuid.UUID(operation_id)
    contract_cancel_seconds = None
    for _ in range(5):
        # Wait briefly for an in-flight poll to finish so its observation is not lost.
        lock = rt.redis.lock(
            f"{rt.settings.key_prefix}:lease:{op_id}",
            timeout=rt.settings.lease_ttl_seconds,
            blocking=True,
            blocking_timeout=rt.settings.lease_ttl_seconds,
            thread_local=False,
        )
        acquired = lock.acquire()
        try:
            now = utcnow()
            with transaction(rt.settings.database_url) as session:
                row = store.load(session, op_id)
                if row is None:
                    raise RefusedInputError(f"no operation {operation_id}")
                if row.state in (S.cancel_requested.value, S.cancelling.value):
                    return row.state
                if row.state not in CANCELLABLE:
                    raise RefusedInputError(
                        f"operation {operation_id} is {row.state}; cancel is possible only "
                        f"from {', '.join(sorted(CANCELLABLE))}"
                    )
                contract = rt.contract(row.provider)
                override = (row.validation_summary or {}).get("cancel_deadline_seconds")
                contract_cancel_seconds = override or contract.limits.cancel_deadline_seconds
                try:
                    # fenced_update's RETURNING hands back this same identity-mapped
                    # object without refreshing it, so its .state is the old one.
                    store.fenced_update(
                        session,
                        row,
                        changes={
                            "state": S.cancel_requested.value,
                            "cancel_requested_by": requested_by,
                            "cancel_reason": reason,
                            "cancel_deadline": now + timedelta(seconds=contract_cancel_seconds),
                            "next_poll_at": now,
                            "dispatched_at": now,
                        },
                        drafts=[
                            EventDraft(
                                kind=EventKind.cancel_requested,
                                actor=f"user:{requested_by}",
                                at=now,
                                from_state=row.state,
                                to_state=S.cancel_requested.value,
                                cause=reason,
                            )
                        ],
                        now=now,
                    )
                except StaleVersionError:
                    continue
        finally:
            if acquired:
                with contextlib.suppress(Exception):
                    lock.release()
        from tasks.pipeline import enqueue

        enqueue(rt, op_id, S.cancel_requested.value)
        return S.cancel_requested.value
    raise StaleVersionError(operation_id, -1)


def escalation_options(operation_id: str, runtime: Runtime | None = None) -> list[Option]:
    """The bounded options a human may pick for a stopped operation."""
    rt = runtime or current()
    with transaction(rt.settings.database_url) as session:
        row = store.load(session, uuid.UUID(operation_id))
        if row is None:
            raise RefusedInputError(f"no operation {operation_id}")
        return options_for(_escalation_view(rt, row))


def _escalation_view(rt: Runtime, row: OperationRow) -> EscalationView:
    reason = row.escalation_reason
    return EscalationView(
        state=S(row.state),
        reason=EscalationReason(reason) if reason else None,
        has_remote_job=row.remote_job_id is not None and row.status_url is not None,
        contract_has_cancel=rt.contract(row.provider).cancel is not None,
        extensions_used=row.extensions_used,
    )


def decide_escalation(
    operation_id: str, option: str, approver: str, note: str = "", runtime: Runtime | None = None
) -> str:
    """Apply a human's pick from the offered options; returns the new state.

    Raises RefusedInputError when the option is not on offer. Counters are never
    reset: bounds are raised and the new bounds are recorded in the event.
    """
    rt = runtime or current()
    kind = OptionKind(option) if option in OptionKind.__members__ else None
    if kind is None:
        raise RefusedInputError(
            f"unknown option {option!r}; options are {', '.join(OptionKind.__members__)}"
        )
    now = utcnow()
    with transaction(rt.settings.database_url) as session:
        row = store.load(session, uuid.UUID(operation_id))
        if row is None:
            raise RefusedInputError(f"no operation {operation_id}")
        view = _escalation_view(rt, row)
        limits = rt.contract(row.provider).limits
        changes = apply_option(
            view,
            kind,
            Bounds(
                result_deadline=row.result_deadline,
                max_status_requests=row.max_status_requests,
                max_transport_failures=row.max_transport_failures,
                cancel_deadline=row.cancel_deadline,
            ),
            now=now,
            cancel_window=timedelta(seconds=limits.cancel_deadline_seconds),
        )
        bounds = {
            k: (v.isoformat() if hasattr(v, "isoformat") else v)
            for k, v in changes.items()
            if k not in ("state", "dispatched_at")
        }
        stored = store.fenced_update(
            session,
            row,
            changes=changes,
            drafts=[
                EventDraft(
                    kind=EventKind.human_decision,
                    actor=f"human:{approver}",
                    at=now,
                    from_state=row.state,
                    to_state=changes["state"],
                    cause=kind.value,
                    excerpt={
                        "option": kind.value,
                        "note": note,
                        "escalation_reason": row.escalation_reason,
                        "new_bounds": bounds,
                    },
                )
            ],
            now=now,
        )
    from tasks.pipeline import enqueue

    enqueue(rt, stored.operation_id, stored.state)
    return stored.state


def approve(
    operation_id: str,
    fingerprint: str,
    approver: str,
    valid_for_seconds: float = 3600,
    runtime: Runtime | None = None,
) -> str:
    """Approve an operation waiting for approval; bound to its fingerprint, and expiring.

    Raises RefusedInputError when the operation is not awaiting approval or the
    fingerprint differs (a changed payload needs a new approval).
    """
    rt = runtime or current()
    now = utcnow()
    with transaction(rt.settings.database_url) as session:
        row = store.load(session, uuid.UUID(operation_id))
        if row is None or row.state != S.awaiting_approval.value:
            raise RefusedInputError(f"operation {operation_id} is not awaiting approval")
        if row.request_fingerprint != fingerprint:
            raise RefusedInputError(
                "the approval names a different fingerprint than the "
                "operation's; a changed payload needs a new approval"
            )
        expires = now + timedelta(seconds=valid_for_seconds)
        stored = store.fenced_update(
            session,
            row,
            changes={
                "state": S.create_pending.value,
                "authorised_by": approver,
                "approval_expires_at": expires,
                "next_poll_at": now,
                "dispatched_at": now,
            },
            drafts=[
                EventDraft(
                    kind=EventKind.approved,
                    actor=f"human:{approver}",
                    at=now,
                    from_state=row.state,
                    to_state=S.create_pending.value,
                    excerpt={"fingerprint": fingerprint, "expires_at": expires.isoformat()},
                )
            ],
            now=now,
        )
    from tasks.pipeline import enqueue

    enqueue(rt, stored.operation_id, stored.state)
    return stored.state
