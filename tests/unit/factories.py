"""Frozen operations and provider answers for the decision tables (no servers)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobwarden.models.contract import ProviderContract
from jobwarden.models.contract_loader import load_contract
from jobwarden.models.history import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.requests import StepContext
from jobwarden.models.signals import HttpObservation, RawResponse, TransportFailure
from jobwarden.models.states import OperationState

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"
NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
TOKEN = "jw-0123456789abcdef"
BASE = "http://127.0.0.1:8765"


def contract(name: str = "sandbox") -> ProviderContract:
    return load_contract(SHIPPED / f"{name}.toml")


def context(name: str = "sandbox", **changes: Any) -> StepContext:
    c = contract(name)
    if changes:
        c = replace(c, **changes)
    return StepContext(contract=c, base_url=c.base_url)


def operation(state: OperationState = OperationState.create_pending, **overrides: Any) -> Operation:
    values: dict[str, Any] = {
        "operation_id": uuid.UUID(int=1),
        "tenant": "t",
        "provider": "sandbox",
        "idempotency_key": "k",
        "source_event_id": None,
        "provider_token": TOKEN,
        "request_fingerprint": "f" * 64,
        "method": "POST",
        "route": "/providers/sandbox/operations",
        "command": {"report": "monthly"},
        "remote_job_id": None,
        "status_url": None,
        "state": state,
        "version": 3,
        "trace_id": "a" * 32,
        "requested_by": "svc",
        "authorised_by": "svc",
        "approval_expires_at": None,
        "created_at": NOW - timedelta(minutes=1),
        "accepted_at": None,
        "create_deadline": NOW + timedelta(minutes=10),
        "result_deadline": NOW + timedelta(hours=1),
        "cancel_deadline": None,
        "cancel_window_seconds": None,
        "next_poll_at": None,
        "dispatched_at": None,
        "create_attempts": 0,
        "status_requests_used": 0,
        "max_status_requests": 50,
        "transport_failures_used": 0,
        "max_transport_failures": 3,
        "consecutive_rate_limited": 0,
        "poll_attempt": 0,
        "extensions_used": 0,
        "last_remote_state": None,
        "last_http_status": None,
        "progress": None,
        "escalation_reason": None,
        "escalation_detail": None,
        "cancel_requested_by": None,
        "cancel_reason": None,
        "result_reference": None,
        "validation_summary": None,
        "event_count": 2,
        "last_event_hash": "0" * 64,
        "updated_at": NOW - timedelta(minutes=1),
        "last_event_kind": EventKind.intent_recorded,
    }
    values.update(overrides)
    return Operation(**values)


def answer(
    status: int | None,
    body: object = None,
    *,
    content: bytes | None = None,
    content_type: str | None = "application/json",
    failure: TransportFailure | None = None,
    body_problem: str | None = None,
    **headers: str,
) -> RawResponse:
    return RawResponse(
        observation=HttpObservation(
            status_code=status,
            headers={k.replace("_", "-").lower(): v for k, v in headers.items()},
            body=body,
            body_problem=body_problem,
            transport_failure=failure,
        ),
        content=content if content is not None else b"",
        content_type=content_type if status is not None else None,
        provider_request_id=None,
    )
