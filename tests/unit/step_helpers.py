"""What the step tables (tests/unit/test_step_*.py) share: contexts for each shipped
convention, deadlines, and operations right after a create, reconcile or status claim.

The tables are pure: frozen operations, shipped contracts (varied with
``dataclasses.replace``), answers built by hand, a fixed ``NOW`` and ``u = 1`` (the full
backoff ceiling). A claim is simulated as the runner does it: ``plan`` the ``Send``, apply
its changes, then ask ``after`` with that snapshot.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from jobwarden.models.actions import DelaySource, ProviderRequest, Send, Wait
from jobwarden.models.contracts.contract import JobLocator, ReconciliationPath, ReconciliationSpec
from jobwarden.models.create_decisions import before_create, before_reconcile
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.provider.signals import TransportFailure
from jobwarden.models.states import OperationState
from tests.unit.factories import BASE, NOW, claimed, context, contract, operation, planned

S = OperationState

SANDBOX = context()
AZURE = context("operation_location")
GOOGLE = context("google_aip151")
OPENAI = context("openai_batch")
# The sandbox with its status URL in the Location header, as a contract may say (no path
# templates then: the job is known by that URL).
LOCATION = context(
    create=replace(contract().create, job_locator=JobLocator.location, job_id_pointer=None),
    status=replace(contract().status, path=None),
    cancel=None,
)
LOOKUP = context(
    reconciliation=ReconciliationSpec(
        path=ReconciliationPath.lookup_by_reference,
        lookup_path="/v1/jobs?reference={token}",
        lookup_job_id_pointer="/data/0/id",
    )
)
CONTEXTS: dict[str, StepContext] = {
    "sandbox": SANDBOX,
    "operation_location": AZURE,
    "google_aip151": GOOGLE,
    "openai_batch": OPENAI,
    "location": LOCATION,
    "lookup": LOOKUP,
}
CREATE_DEADLINE = NOW + timedelta(minutes=10)  # the factory's
RESULT_DEADLINE = NOW + timedelta(hours=1)
TRANSPORT_FAILURES = list(TransportFailure)
RESULT = json.dumps(
    {"items": [{"id": 1}, {"id": 2}], "failed_items": [], "record_count": 2}
).encode()
SHA = hashlib.sha256(RESULT).hexdigest()


def token_of(ctx: StepContext, request: ProviderRequest) -> object:
    """The provider token where the contract says it travels."""
    spec = ctx.contract.create
    if spec.token_placement.value == "header":
        return request.headers.get(spec.token_name)
    assert isinstance(request.json_body, dict)
    return request.json_body.get(spec.token_name)


def sent_create(ctx: StepContext = SANDBOX, **overrides: Any) -> tuple[Operation, Send]:
    """A create_pending operation right after its create claim committed."""
    op = operation(S.create_pending, **overrides)
    decided = before_create(op, ctx, NOW)
    assert isinstance(decided.action, Send)
    return claimed(op, planned(op, decided)), decided.action


def sent_reconcile(
    ctx: StepContext = SANDBOX, state: S = S.create_unknown, **overrides: Any
) -> tuple[Operation, Send]:
    values: dict[str, Any] = {"create_attempts": 1, "last_event_kind": EventKind.create_ambiguous}
    op = operation(state, **(values | overrides))
    decided = before_reconcile(op, ctx, NOW)
    assert isinstance(decided.action, Send)
    return claimed(op, planned(op, decided)), decided.action


def first_poll_wait(ctx: StepContext, now: datetime = NOW) -> Wait:
    initial = ctx.contract.poll.initial_delay_seconds
    return Wait(
        until=now + timedelta(seconds=initial),
        delay_seconds=initial,
        delay_source=DelaySource.initial_delay,
        clipped_to_deadline=False,
        cause="first_poll",
    )


def backoff_wait(seconds: float, cause: str = "wait") -> Wait:
    return Wait(
        until=NOW + timedelta(seconds=seconds),
        delay_seconds=seconds,
        delay_source=DelaySource.local_backoff,
        clipped_to_deadline=False,
        cause=cause,
    )


def polling(state: S, **overrides: Any) -> Operation:
    values: dict[str, Any] = {
        "remote_job_id": "job-1",
        "status_url": f"{BASE}/v1/jobs/job-1",
        "accepted_at": NOW - timedelta(minutes=1),
        "next_poll_at": NOW,
        "status_requests_used": 3,
        "cancel_deadline": NOW + timedelta(minutes=5) if state is S.cancelling else None,
    }
    return operation(state, **(values | overrides))


def cancelling_requested(**overrides: Any) -> Operation:
    values: dict[str, Any] = {
        "remote_job_id": "job-1",
        "status_url": f"{BASE}/v1/jobs/job-1",
        "accepted_at": NOW - timedelta(minutes=1),
        "cancel_deadline": NOW + timedelta(minutes=5),
        "next_poll_at": NOW,
        "last_event_kind": EventKind.cancel_requested,
    }
    return operation(S.cancel_requested, **(values | overrides))
