"""Intake: the one function behind the Python call, the Celery task and the HTTP API.

The key is claimed atomically (unique tenant + key) before anything else
happens; the intent row is committed before any message is published.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import OperationalError

from jobwarden.models.db import transaction
from jobwarden.models.errors import InvalidSubmissionError
from jobwarden.models.fingerprint import request_fingerprint
from jobwarden.models.history import GENESIS_HASH, EventDraft, EventKind, chain
from jobwarden.models.states import OperationState as S
from jobwarden.models.tables import EventRow, OperationRow
from jobwarden.tasks.runtime import Runtime, current, utcnow

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
        # Invariant 1 names who authorised the create: without an approval step the
        # submitter's request is the authority; with one, the approver fills this in.
        "authorised_by": None if contract.requires_approval else requested_by,
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
        values["cancel_window_seconds"] = cancel_deadline_seconds
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
        from jobwarden.tasks.pipeline import enqueue

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
