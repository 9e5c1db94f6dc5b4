"""Someone is told (issue 20): with real workers and beat, an operation that needs a human
reaches its tenant's receiver as a Standard Webhooks notification, signed, from the
outbox its own write filled, delivered by beat's relay (never by the step).

The receiver is the session's (tests/acceptance/conftest.py: ``notification_receiver``);
only the tenant ``NOTIFIED_TENANT`` has it as its target.
"""

from __future__ import annotations

import json
import secrets
import uuid
from typing import Any

from standardwebhooks import Webhook

from jobwarden.demo.harness import Stack, wait_for
from tests.acceptance.conftest import NOTIFIED_TENANT, NOTIFY_SECRET, Pipeline
from tests.integration.notify_helpers import Receiver, outbox_rows


def _submit(pipeline: Pipeline, behaviour: dict[str, Any], provider: str = "sandbox") -> str:
    from jobwarden.tasks.intake import submit_operation

    result = submit_operation(
        tenant=NOTIFIED_TENANT,
        provider=provider,
        idempotency_key=secrets.token_hex(8),
        command={"kind": "export", "behaviour": behaviour},
        requested_by="pytest",
    )
    assert result.operation_id is not None, result
    pipeline.created.append(result.operation_id)
    return result.operation_id


def _delivered(pipeline: Pipeline, receiver: Receiver, op: str, kind: str) -> Any:
    """The one request that reached the receiver for ``op``'s ``kind`` notification, once
    the outbox says it was delivered (waits on the outbox row, not on time)."""

    def done() -> dict[str, object] | None:
        rows = outbox_rows(pipeline.database_url, uuid.UUID(op))
        return next(
            (r for r in rows if r["channel"] == "webhook" and r["status"] == "delivered"), None
        )

    row = wait_for(done, timeout=30, what=f"{op}'s {kind} notification delivered")
    assert row is not None
    assert str(row["event_id"]).startswith(f"{kind}:{op}:")
    same = [r for r in list(receiver.requests) if r.headers["webhook-id"] == row["event_id"]]
    assert len(same) == 1, same
    return same[0]


def test_an_escalation_reaches_the_tenants_receiver_signed_through_beats_relay(
    stack: Stack, pipeline: Pipeline, notification_receiver: Receiver
) -> None:
    op = _submit(pipeline, {"unknown_state_at": 1, "polls_to_finish": 5})
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "unknown_state")
    got = _delivered(pipeline, notification_receiver, op, "escalated")
    assert got.path == "/hook"
    verified = Webhook(NOTIFY_SECRET).verify(got.body, got.headers)
    assert verified["type"] == "operation.escalated"
    data = verified["data"]
    assert (data["operation_id"], data["tenant"], data["state"]) == (
        op,
        NOTIFIED_TENANT,
        "escalated",
    )
    assert data["reason"] == "unknown_state"
    # What is sent is what was signed; the body names no secret of the provider's.
    assert "Bearer" not in got.body.decode() and json.loads(got.body) == verified
    pipeline.verify_all()


def test_an_operation_awaiting_approval_tells_its_tenant_from_intakes_own_write(
    stack: Stack, pipeline: Pipeline, notification_receiver: Receiver
) -> None:
    op = _submit(pipeline, {"polls_to_finish": 1}, provider="sandbox_approval")
    assert pipeline.row(op).state == "awaiting_approval"
    got = _delivered(pipeline, notification_receiver, op, "awaiting_approval")
    verified = Webhook(NOTIFY_SECRET).verify(got.body, got.headers)
    assert verified["type"] == "operation.awaiting_approval"
    assert verified["data"]["operation_id"] == op
    assert pipeline.creates(op) == []  # telling someone sent nothing to the provider
