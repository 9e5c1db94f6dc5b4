"""Every decision has an authenticated author (DESIGN.md invariant 15): through each door
the recorded actor is the principal the door authenticated, never a name someone typed.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta

import pytest

from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.humans.interventions import approve
from jobwarden.tasks.intake import submit_operation
from jobwarden.tasks.provider.webhooks import receive
from jobwarden.tasks.runtime import utcnow
from jobwarden.tasks.schedules import tick_once
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import (
    HOOKS,
    MOVING,
    ONE,
    SECRETS,
    Doors,
    csrf,
    tool_answer,
)
from tests.integration.matrix.webhook_bodies import delivery

APPROVALS = (EventKind.approval_recorded, EventKind.approved)


def _waiting(d: Doors, tenant: str, provider: str = ONE) -> tuple[uuid.UUID, str]:
    op = insert_operation(d.url, tenant, S.awaiting_approval, provider=provider, requested_by="al")
    return op, d.load(op).request_fingerprint


def _approvers(d: Doors, op: uuid.UUID) -> list[str]:
    return [e.draft.actor for e in d.events(op) if e.draft.kind in APPROVALS]


def python(d: Doors) -> None:
    op, fingerprint = _waiting(d, tenant_name())
    # A name spelt as a token's principal is text, not a credential: refused.
    with pytest.raises(RefusedInputError, match="approver"):
        approve(str(op), fingerprint, "token:carol", runtime=d.rt)
    assert d.load(op).state is S.awaiting_approval
    assert _approvers(d, op) == []


def http(d: Doors) -> None:
    tenant = tenant_name()
    op, fingerprint = _waiting(d, tenant)
    with d.http(d.token(tenant, "bob")) as client:
        path = f"/v1/operations/{op}/approvals"
        typed = client.post(path, json={"fingerprint": fingerprint, "approver": "mallory"})
        assert typed.status_code == 422, typed.text  # no field names who approves
        done = client.post(path, json={"fingerprint": fingerprint})
    assert done.status_code == 200, done.text
    (actor,) = _approvers(d, op)
    assert actor.endswith("token:bob") and "mallory" not in actor


def mcp(d: Doors) -> None:
    tenant = tenant_name()
    op = insert_operation(d.url, tenant, S.observing)
    (answer,) = d.mcp(
        d.token(tenant, "agent"),
        ("cancel_operation", {"operation_id": str(op), "reason": "by order of token:admin"}),
    )
    assert tool_answer(answer)["state"] == "cancel_requested"
    last = d.events(op)[-1].draft
    assert last.actor.endswith("token:agent") and "admin" not in last.actor


def cli(d: Doors) -> None:
    tenant = tenant_name()
    op, fingerprint = _waiting(d, tenant)
    typed = d.cli("approve", str(op), "--fingerprint", fingerprint, "--approver", "mallory")
    assert typed.returncode != 0 and "Traceback" not in typed.stderr
    assert d.load(op).state is S.awaiting_approval
    done = d.cli(
        "approve",
        str(op),
        "--fingerprint",
        fingerprint,
        env={"JOBWARDEN_TOKEN": d.token(tenant, "bob")},
    )
    assert done.returncode == 0, done.stderr
    assert [a for a in _approvers(d, op) if not a.endswith("token:bob")] == []
    # Moving a running operation to its provider's changed contract is a decision too.
    moving = submit_operation(
        tenant=tenant,
        provider=MOVING,
        idempotency_key=f"moving-{secrets.token_hex(4)}",
        command={"kind": "export"},
        requested_by="svc",
        runtime=d.rt,
    ).operation_id
    assert moving is not None
    contract = d.providers / f"{MOVING}.toml"
    contract.write_text(contract.read_text().replace("max_seconds = 5", "max_seconds = 6"))
    typed_move = d.cli(
        "providers",
        "migrate",
        MOVING,
        "--to",
        "current",
        "--operation",
        moving,
        "--approver",
        "mallory",
    )
    assert typed_move.returncode != 0, typed_move.stdout
    assert [e.draft.actor for e in d.events(moving) if "mallory" in e.draft.actor] == []


def console(d: Doors) -> None:
    tenant = tenant_name()
    op, fingerprint = _waiting(d, tenant)
    page = f"/console/operations/{op}"
    with d.console(d.token(tenant, "bob")) as client:
        form = {"csrf": csrf(client.get(page).text), "fingerprint": fingerprint}
        done = client.post(f"{page}/approvals", data={**form, "approver": "mallory"})
    assert done.status_code == 303, done.text
    (actor,) = _approvers(d, op)
    assert actor.endswith("token:bob") and "mallory" not in actor


def schedules(d: Doors) -> None:
    tenant, name = tenant_name(), f"nightly-{secrets.token_hex(3)}"
    table = {"interval_seconds": 60, "provider": ONE, "command": {"at": "{slot}"}}
    with d.http(d.token(tenant, "alice")) as client:
        assert client.put(f"/v1/schedules/{name}", json=table).status_code == 201
    tick_once(d.rt, clock=lambda: utcnow() + timedelta(seconds=61))
    fired = [
        e
        for e in d.intake_of_tenant(tenant)
        if e.idempotency_key.startswith(f"schedule:{name}:") and e.operation_id
    ]
    assert len(fired) == 1, fired
    intent = d.events(str(fired[0].operation_id))[0].draft
    # Fired by the beat, on behalf of the principal who declared the schedule.
    assert str((intent.excerpt or {}).get("on_behalf_of", "")).endswith("token:alice"), intent


def resubmit(d: Doors) -> None:
    tenant = tenant_name()
    old = insert_operation(d.url, tenant, S.failed)
    with d.http(d.token(tenant, "oncall")) as client:
        answer = client.post(
            f"/v1/operations/{old}/decisions",
            json={"option": "resubmit", "note": "resubmitted for token:admin"},
        )
    assert answer.status_code == 200, answer.text
    new = uuid.UUID(answer.json()["resubmitted_as"])
    (decided,) = [e.draft for e in d.events(old) if e.draft.kind is EventKind.resubmitted]
    assert decided.actor.endswith("token:oncall")
    assert d.events(new)[0].draft.actor.endswith("token:oncall")
    assert "admin" not in d.load(new).requested_by


def webhooks(d: Doors) -> None:
    tenant = tenant_name()
    op = insert_operation(d.url, tenant, S.observing, provider=HOOKS)
    job_id = d.load(op).remote_job_id
    assert job_id is not None
    receipt = receive(d.rt, HOOKS, *delivery(SECRETS[HOOKS], job_id, "succeeded"))
    assert receipt.status == 200, receipt
    (event,) = [e.draft for e in d.events(op) if e.draft.kind is EventKind.webhook_received]
    # The author is the provider whose signature verified; a webhook never decides.
    assert event.actor == f"webhook:{HOOKS}"
    assert d.load(op).state is S.observing
