"""Frozen operations and provider answers for the decision tables (no servers)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobwarden.models.actions import Decided, Send
from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.effects import plan
from jobwarden.models.history.chain import EventKind
from jobwarden.models.intake.submission import Submission
from jobwarden.models.operation import Operation
from jobwarden.models.plan import Plan
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.provider.signals import HttpObservation, RawResponse, TransportFailure
from jobwarden.models.reservations import as_sent, settled
from jobwarden.models.states import OperationState, check_transition

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"
# Fixture contracts beside the shipped ones (operation_location: a plain Operation-Location
# contract, as azure_lro was before the Azure conventions).
FIXTURES = Path(__file__).resolve().parent / "contracts" / "valid"
NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
TOKEN = "jw-0123456789abcdef"
BASE = "http://127.0.0.1:8765"


def contract(name: str = "sandbox") -> ProviderContract:
    shipped = SHIPPED / f"{name}.toml"
    return load_contract(shipped if shipped.exists() else FIXTURES / f"{name}.toml")


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
        "authorized_by": "svc",
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
        "step_failures": 0,
        "poll_not_before": None,
        "result_fetch_attempts": 0,
        "collect_deadline": None,
        "first_sent_at": None,
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
    return Operation.from_mapping(values)  # text columns become enums, as a read does


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


# --- builders for the step and plan tables (no database, no clock) ----------------------

ACTOR = "worker:test"
MAX_COUNTDOWN = 60.0  # seconds: a longer wait is parked in next_poll_at, not a countdown


def reply(
    status: int | None,
    body: object = None,
    *,
    headers: Mapping[str, str] | None = None,
    failure: TransportFailure | None = None,
    body_problem: str | None = None,
    content: bytes = b"",
    content_type: str | None = "application/json",
    request_id: str | None = None,
) -> RawResponse:
    """Like ``answer`` with headers as a mapping (keys as the edge gives them: lower-cased)."""
    return RawResponse(
        observation=HttpObservation(
            status_code=status,
            headers={k.lower(): v for k, v in (headers or {}).items()},
            body=body,
            body_problem=body_problem,
            transport_failure=failure,
        ),
        content=content,
        content_type=content_type if status is not None else None,
        provider_request_id=request_id,
    )


def planned(
    op: Operation,
    decided: Decided,
    *,
    now: datetime = NOW,
    answer: RawResponse | None = None,
    max_countdown: float = MAX_COUNTDOWN,
    sent: Send | None = None,
) -> Plan:
    """The plan a step writes for ``decided``: planned over the snapshot the decision saw
    (``op`` as ``sent``, a reserved request, left it), then settled over ``op``."""
    seen = as_sent(op, sent) if sent is not None else op
    p = plan(seen, decided, actor=ACTOR, now=now, answer=answer, max_countdown=max_countdown)
    return settled(op, p, spent=sent)


def claimed(op: Operation, p: Plan) -> Operation:
    """The snapshot the step runner holds after a claim's plan committed (as the store returns)."""
    last = p.events[-1].kind if p.events else op.last_event_kind
    return replace(
        op.with_changes(
            {
                **p.changes,
                "version": op.version + 1,
                "event_count": op.event_count + len(p.events),
            }
        ),
        last_event_kind=last,
    )


def walked(src: OperationState, p: Plan) -> list[OperationState]:
    """The states a plan's events move through from ``src``; raises off the transition table.

    Stricter than ``store.check_path``: a moving event must start where the previous one
    ended, and a state change in ``changes`` must be where the events arrive.
    """
    at, path = src, []
    for draft in p.events:
        if draft.to_state is None or draft.to_state == draft.from_state:
            continue
        assert draft.from_state == at.value, f"{draft.kind} leaves {draft.from_state}, not {at}"
        hop = OperationState(draft.to_state)
        check_transition(at, hop)
        at = hop
        path.append(hop)
    if "state" in p.changes:
        assert OperationState(p.changes["state"]) is at, f"changes say {p.changes['state']}"
    else:
        assert at is src, "the events move the operation but the changes do not"
    return path


def submission() -> Submission:
    """A plain submission to the sandbox, as intake's rules leave it."""
    return Submission(
        tenant="t",
        provider="sandbox",
        idempotency_key="k",
        command={"report": "monthly"},
        requested_by="svc",
        source_event_id=None,
        method="POST",
        route="/providers/sandbox/operations",
        max_status_requests=None,
        result_deadline_seconds=None,
        max_transport_failures=None,
        cancel_deadline_seconds=None,
    )
