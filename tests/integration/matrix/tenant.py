"""Tenant isolation through every door (DESIGN.md invariant 12): tenant B's credential
through the door neither sees nor touches tenant A's operation, and a key is a tenant's own.
"""

from __future__ import annotations

import secrets
from typing import Any

from jobwarden.models.states import OperationState as S
from jobwarden.tasks.intake import submit_from_message, submit_operation
from jobwarden.tasks.provider.webhooks import receive
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import (
    COMMAND,
    HOOKS,
    OTHER_HOOKS,
    SECRETS,
    Doors,
    as_message,
    csrf,
    tool_answer,
    tool_error,
)
from tests.integration.matrix.webhook_bodies import delivery


def _same_key_in_two_tenants(d: Doors, submit: Any) -> None:
    ours, theirs, key = tenant_name(), tenant_name(), f"shared-{secrets.token_hex(4)}"
    mine = submit(ours, key)
    other = submit(theirs, key)
    assert (mine["outcome"], other["outcome"]) == ("created", "created")
    assert mine["operation_id"] != other["operation_id"]
    # Their replay names their operation, never ours.
    assert submit(theirs, key)["operation_id"] == other["operation_id"]
    assert d.load(mine["operation_id"]).tenant == ours


def python(d: Doors) -> None:
    def submit(tenant: str, key: str) -> dict[str, Any]:
        return submit_operation(
            tenant=tenant,
            provider="sandbox",
            idempotency_key=key,
            command=COMMAND,
            requested_by="svc",
            runtime=d.rt,
        ).as_dict()

    _same_key_in_two_tenants(d, submit)


def celery(d: Doors) -> None:
    def submit(tenant: str, key: str) -> dict[str, Any]:
        fields = {"tenant": tenant, "provider": "sandbox", "idempotency_key": key}
        return submit_from_message(as_message({**fields, "command": COMMAND, "requested_by": "s"}))

    _same_key_in_two_tenants(d, submit)


def http(d: Doors) -> None:
    ours, theirs = tenant_name(), tenant_name()
    key = f"http-{secrets.token_hex(4)}"
    body = {"provider": "sandbox", "command": COMMAND}
    with d.http(d.token(ours, "svc")) as client:
        created = client.post("/v1/operations", json=body, headers={"Idempotency-Key": key})
    assert created.status_code == 201, created.text
    op = created.json()["operation_id"]
    with d.http(d.token(theirs, "svc")) as client:
        assert client.get(f"/v1/operations/{op}").status_code == 404
        assert client.get(f"/v1/operations/{op}/events").status_code == 404
        assert client.get(f"/v1/operations/{op}/receipt").status_code == 404
        cancel = client.post(f"/v1/operations/{op}/cancel", json={"reason": "not mine"})
        assert cancel.status_code == 404, cancel.text
        listed = client.get("/v1/operations").json()
        assert op not in {o["operation_id"] for o in listed["operations"]}
        again = client.post("/v1/operations", json=body, headers={"Idempotency-Key": key})
    assert again.status_code == 201 and again.json()["operation_id"] != op
    assert d.load(op).state is S.create_pending


def mcp(d: Doors) -> None:
    ours, theirs = tenant_name(), tenant_name()
    op = str(insert_operation(d.url, ours, S.escalated, escalation_reason="unknown_state"))
    got, receipt, cancel, listed = d.mcp(
        d.token(theirs, "agent"),
        ("get_operation", {"operation_id": op}),
        ("get_operation_receipt", {"operation_id": op}),
        ("cancel_operation", {"operation_id": op, "reason": "not mine"}),
        ("list_escalations", {}),
    )
    for text in (tool_error(got), tool_error(receipt), tool_error(cancel)):
        assert "not_found" in text and ours not in text
    assert tool_answer(listed)["counts"]["total"] == 0
    assert d.load(op).state is S.escalated


def cli(d: Doors) -> None:
    ours, theirs = tenant_name(), tenant_name()
    op = insert_operation(d.url, ours, S.observing)
    done = d.cli(
        "cancel", str(op), "--reason", "not mine", env={"JOBWARDEN_TOKEN": d.token(theirs, "ops")}
    )
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr
    assert d.load(op).state is S.observing


def console(d: Doors) -> None:
    ours, theirs = tenant_name(), tenant_name()
    op = insert_operation(d.url, ours, S.awaiting_approval, provider="sandbox")
    page = f"/console/operations/{op}"
    with d.console(d.token(theirs, "ops")) as client:
        assert client.get(page).status_code == 404
        queue = client.get("/console/").text
        assert str(op) not in queue
        # A form token of their own session, posted at our operation.
        token = csrf(queue)
        fingerprint = d.load(op).request_fingerprint
        approval = client.post(
            f"{page}/approvals", data={"csrf": token, "fingerprint": fingerprint}
        )
        cancel = client.post(f"{page}/cancel", data={"csrf": token, "reason": "not mine"})
    assert (approval.status_code, cancel.status_code) == (404, 404)
    assert d.load(op).state is S.awaiting_approval


def schedules(d: Doors) -> None:
    ours, theirs = tenant_name(), tenant_name()
    name = f"nightly-{secrets.token_hex(3)}"
    table = {"interval_seconds": 3600, "provider": "sandbox", "command": {"at": "{slot}"}}
    with d.http(d.token(ours, "alice")) as client:
        assert client.put(f"/v1/schedules/{name}", json=table).status_code == 201
    with d.http(d.token(theirs, "mallory")) as client:
        assert client.get(f"/v1/schedules/{name}").status_code == 404
        assert client.post(f"/v1/schedules/{name}/pause").status_code == 404
        assert client.post(f"/v1/schedules/{name}/trigger").status_code == 404
        assert name not in {s["name"] for s in client.get("/v1/schedules").json()["schedules"]}
    with d.http(d.token(ours, "reader", ("read",))) as client:
        shown = client.get(f"/v1/schedules/{name}").json()
    assert shown["status"] == "active"


def resubmit(d: Doors) -> None:
    ours, theirs = tenant_name(), tenant_name()
    old = insert_operation(d.url, ours, S.failed)
    with d.http(d.token(theirs, "oncall")) as client:
        answer = client.post(
            f"/v1/operations/{old}/decisions", json={"option": "resubmit", "note": "mine now"}
        )
    assert answer.status_code == 404, answer.text
    assert d.find(ours, f"resubmit:{old}") is None
    assert d.load(old).resubmitted_as is None


def webhooks(d: Doors) -> None:
    # A webhook's credential is its provider's signing secret: a delivery signed for one
    # provider never reaches an operation at another, whose job id it names.
    theirs_op = insert_operation(
        d.url,
        tenant_name(),
        S.observing,
        provider=OTHER_HOOKS,
        next_poll_at=None,
    )
    job_id = d.load(theirs_op).remote_job_id
    assert job_id is not None
    before = d.load(theirs_op)
    receipt = receive(d.rt, HOOKS, *delivery(SECRETS[HOOKS], job_id, "succeeded"))
    assert (receipt.status, receipt.outcome) == (202, "unknown_job")
    after = d.load(theirs_op)
    assert (after.version, after.event_count) == (before.version, before.event_count)
    # Signed with our secret but sent to their provider's door: refused as forged.
    forged = receive(d.rt, OTHER_HOOKS, *delivery(SECRETS[HOOKS], job_id, "succeeded"))
    assert (forged.status, forged.outcome) == (401, "refused")
    assert d.load(theirs_op).event_count == before.event_count
