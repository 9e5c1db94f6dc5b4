"""A submission's priority (issue 39, fair shares) reaches the operation through every door
that submits: the Python call, the Celery message, POST /v1/operations, the MCP tool, the
CLI's --priority, a schedule's slots, and a person's resubmission (which keeps the one it
replaces). Refusals of a bad one, naming ``priority``, are the no_500 cells'.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta

from sqlalchemy import update

from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import OperationRow
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.humans.interventions import decide_escalation
from jobwarden.tasks.intake import submit_from_message, submit_operation
from jobwarden.tasks.runtime import utcnow
from jobwarden.tasks.schedules import tick_once
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import COMMAND, Doors, as_message, tool_answer


def python(d: Doors) -> None:
    answer = submit_operation(
        tenant=tenant_name(),
        provider="sandbox",
        idempotency_key=f"py-{secrets.token_hex(4)}",
        command=COMMAND,
        requested_by="billing",
        priority=3,
        runtime=d.rt,
    )
    assert answer.operation_id is not None
    assert d.load(answer.operation_id).priority == 3


def celery(d: Doors) -> None:
    fields = {"tenant": tenant_name(), "provider": "sandbox", "requested_by": "etl"}
    message = {**fields, "idempotency_key": f"c-{secrets.token_hex(4)}", "command": COMMAND}
    answer = submit_from_message(as_message({**message, "priority": -4}))
    assert d.load(answer["operation_id"]).priority == -4


def http(d: Doors) -> None:
    with d.http(d.token(tenant_name(), "svc")) as client:
        created = client.post(
            "/v1/operations",
            json={"provider": "sandbox", "command": COMMAND, "priority": 5},
            headers={"Idempotency-Key": secrets.token_hex(4)},
        )
        assert created.status_code == 201, created.text
        shown = client.get(f"/v1/operations/{created.json()['operation_id']}").json()
    assert shown["priority"] == 5
    assert d.load(created.json()["operation_id"]).priority == 5


def mcp(d: Doors) -> None:
    start = {"operation_key": "k", "provider": "sandbox", "command": COMMAND, "priority": 6}
    (started,) = d.mcp(d.token(tenant_name(), "agent"), ("start_operation", start))
    assert d.load(tool_answer(started)["operation_id"]).priority == 6


def cli(d: Doors) -> None:
    tenant, key = tenant_name(), f"cli-{secrets.token_hex(4)}"
    done = d.cli(
        "submit", "sandbox", '{"kind": "export"}', "--key", key, "--tenant", tenant,
        "--priority", "7", env={"JOBWARDEN_TOKEN": d.token(tenant, "ops")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (entry,) = d.intake(tenant, key)
    assert d.load(str(entry.operation_id)).priority == 7


def schedules(d: Doors) -> None:
    tenant, name = tenant_name(), f"hourly-{secrets.token_hex(3)}"
    table = {"interval_seconds": 60, "provider": "sandbox", "command": {"at": "{slot}"}}
    with d.http(d.token(tenant, "alice")) as client:
        declared = client.put(f"/v1/schedules/{name}", json={**table, "priority": -2})
        assert declared.status_code == 201, declared.text
    tick_once(d.rt, clock=lambda: utcnow() + timedelta(seconds=61))
    fired = [e for e in d.intake_of_tenant(tenant) if e.idempotency_key.startswith("schedule:")]
    assert len(fired) == 1 and d.load(str(fired[0].operation_id)).priority == -2


def resubmit(d: Doors) -> None:
    tenant = tenant_name()
    old = insert_operation(d.url, tenant, S.failed)
    with transaction(d.url) as session:
        session.execute(
            update(OperationRow).where(OperationRow.operation_id == old).values(priority=9)
        )
    decided = decide_escalation(str(old), "resubmit", "dana", "fixed upstream", runtime=d.rt)
    assert d.load(uuid.UUID(str(decided.resubmitted_as))).priority == 9
