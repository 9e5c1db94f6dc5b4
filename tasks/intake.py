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

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from jobwarden.models import store
from jobwarden.models.db import transaction
from jobwarden.models.errors import InvalidSubmissionError, RefusedInputError
from jobwarden.models.fingerprint import request_fingerprint
from jobwarden.models.history import GENESIS_HASH, EventDraft, EventKind, chain
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.dispatch import enqueue
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
            if store.claim_key(session, values, chained[0], lock_timeout="5s"):
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
        enqueue(rt, op_id, state)
    return result


def _existing(
    session: Session,
    tenant: str,
    provider: str,
    key: str,
    source_event_id: str | None,
    fingerprint: str,
) -> SubmitResult:
    row = store.find_by_key(session, tenant, key)
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
        row = store.find_by_source_event(session, tenant, provider, source_event_id)
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


def submit_from_message(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The Celery intake's answer: the submission's outcome, or why it is invalid."""
    try:
        return submit_operation(**kwargs).as_dict()
    except (RefusedInputError, TypeError) as exc:
        return {"outcome": "invalid", "error": str(exc)}
