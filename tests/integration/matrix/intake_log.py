"""The intake log through every door that submits (DESIGN.md "Intake"): each answer is an
append-only row naming the door it came through and who asked (the token's principal
where the door authenticates one). The log's door column has four values (python,
celery, http, mcp): the CLI and the schedules submit through the Python call and
resubmits through the door the person used, so each row names that door and its caller.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta

from jobwarden.models.persistence.api_store import IntakeEntry
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.humans.interventions import decide_escalation
from jobwarden.tasks.intake import submit_from_message, submit_operation
from jobwarden.tasks.runtime import utcnow
from jobwarden.tasks.schedules import tick_once
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import (
    COMMAND,
    Doors,
    as_message,
    csrf,
    tool_answer,
)


def _only(entries: list[IntakeEntry], door: str, outcome: str = "created") -> IntakeEntry:
    assert [(e.door, e.outcome) for e in entries] == [(door, outcome)], entries
    return entries[0]


def python(d: Doors) -> None:
    tenant, key = tenant_name(), f"py-{secrets.token_hex(4)}"
    answer = submit_operation(
        tenant=tenant,
        provider="sandbox",
        idempotency_key=key,
        command=COMMAND,
        requested_by="billing",
        runtime=d.rt,
    )
    entry = _only(d.intake(tenant, key), "python")
    assert entry.actor == "submitter:billing" and entry.token_id is None
    assert str(entry.operation_id) == answer.operation_id
    assert entry.fingerprint == answer.fingerprint


def celery(d: Doors) -> None:
    tenant, key = tenant_name(), f"celery-{secrets.token_hex(4)}"
    fields = {"tenant": tenant, "provider": "sandbox", "idempotency_key": key}
    answer = submit_from_message(as_message({**fields, "command": COMMAND, "requested_by": "etl"}))
    entry = _only(d.intake(tenant, key), "celery")
    assert entry.actor == "submitter:etl"
    assert str(entry.operation_id) == answer["operation_id"]


def http(d: Doors) -> None:
    tenant, key = tenant_name(), f"http-{secrets.token_hex(4)}"
    secret = d.token(tenant, "svc")
    body = {"provider": "sandbox", "command": COMMAND}
    with d.http(secret) as client:
        created = client.post("/v1/operations", json=body, headers={"Idempotency-Key": key})
        replayed = client.post("/v1/operations", json=body, headers={"Idempotency-Key": key})
    assert created.status_code == 201 and replayed.headers.get("Idempotent-Replayed") == "true"
    entries = d.intake(tenant, key)
    assert [(e.door, e.outcome, e.http_status) for e in entries] == [
        ("http", "created", 201),
        ("http", "replayed", replayed.status_code),
    ]
    for entry in entries:
        assert (entry.actor, entry.token_id) == ("token:svc", d.tokens[secret])
        assert str(entry.operation_id) == created.json()["operation_id"]


def mcp(d: Doors) -> None:
    tenant, key = tenant_name(), f"mcp-{secrets.token_hex(4)}"
    secret = d.token(tenant, "agent")
    (started,) = d.mcp(
        secret,
        ("start_operation", {"operation_key": key, "provider": "sandbox", "command": COMMAND}),
    )
    entry = _only(d.intake(tenant, key), "mcp")
    assert (entry.actor, entry.token_id) == ("token:agent", d.tokens[secret])
    assert str(entry.operation_id) == tool_answer(started)["operation_id"]


def cli(d: Doors) -> None:
    tenant, key = tenant_name(), f"cli-{secrets.token_hex(4)}"
    secret = d.token(tenant, "ops")
    done = d.cli(
        "submit",
        "sandbox",
        '{"kind": "export"}',
        "--key",
        key,
        "--tenant",
        tenant,
        env={"JOBWARDEN_TOKEN": secret},
    )
    assert done.returncode == 0, done.stderr
    entry = _only(d.intake(tenant, key), "python")
    # Who asked is the token the CLI acts with, not a name typed on the command line.
    assert (entry.actor, entry.token_id) == ("token:ops", d.tokens[secret])


def console(d: Doors) -> None:
    tenant = tenant_name()
    old = insert_operation(d.url, tenant, S.failed)
    secret = d.token(tenant, "oncall")
    page = f"/console/operations/{old}"
    with d.console(secret) as client:
        form = {"csrf": csrf(client.get(page).text), "option": "resubmit", "note": "fixed"}
        done = client.post(f"{page}/decisions", data=form)
    assert done.status_code == 303, done.text
    entry = _only(d.intake(tenant, f"resubmit:{old}"), "http")
    assert entry.actor.endswith("token:oncall"), entry.actor
    assert entry.operation_id == d.load(old).resubmitted_as


def schedules(d: Doors) -> None:
    tenant, name = tenant_name(), f"hourly-{secrets.token_hex(3)}"
    table = {"interval_seconds": 60, "provider": "sandbox", "command": {"at": "{slot}"}}
    with d.http(d.token(tenant, "alice")) as client:
        assert client.put(f"/v1/schedules/{name}", json=table).status_code == 201
    # The beat's tick, its clock past the schedule's first slot.
    tick_once(d.rt, clock=lambda: utcnow() + timedelta(seconds=61))
    fired = [e for e in d.intake_of_tenant(tenant) if e.idempotency_key.startswith("schedule:")]
    assert [(e.door, e.outcome, e.actor) for e in fired] == [
        ("python", "created", f"schedule:{name}")
    ]
    assert d.load(str(fired[0].operation_id)).tenant == tenant


def resubmit(d: Doors) -> None:
    tenant = tenant_name()
    old = insert_operation(d.url, tenant, S.failed)
    decided = decide_escalation(str(old), "resubmit", "dana", "fixed upstream", runtime=d.rt)
    entry = _only(d.intake(tenant, f"resubmit:{old}"), "python")
    assert entry.actor.endswith("dana"), entry.actor
    assert entry.operation_id == uuid.UUID(str(decided.resubmitted_as))
