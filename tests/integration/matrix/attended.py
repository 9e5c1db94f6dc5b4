"""No silent wait (issue 36, point 5): an answer naming an operation that waits on a queue
no worker consumes says so, through every door a submitter waits on.

No worker runs in integration tests, so the run's queue is unattended once any stamp a
worker of an earlier test left on it has aged past the silence threshold (waited for,
bounded, before each cell). The opposite, a live worker silencing every door and its
death making them speak again, is tests/integration/test_no_worker_warning.py's, on a
queue of its own.
"""

from __future__ import annotations

import json
import secrets

from jobwarden.demo.harness import wait_for
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.heartbeat import no_worker
from jobwarden.tasks.humans.interventions import decide_escalation
from jobwarden.tasks.intake import submit_from_message, submit_operation
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import COMMAND, Doors, as_message, tool_answer


def unattended(d: Doors) -> None:
    """Wait (bounded) until no worker's stamp on the run's queue is fresh."""
    silence = d.rt.settings.worker_silence_seconds
    wait_for(
        lambda: no_worker(d.rt.redis, d.rt.settings) is not None,
        timeout=silence + 30,
        interval=0.5,
        what="the run's queue to have no worker",
    )


def python(d: Doors) -> None:
    unattended(d)
    answer = submit_operation(
        tenant=tenant_name(),
        provider="sandbox",
        idempotency_key=f"py-{secrets.token_hex(4)}",
        command=COMMAND,
        requested_by="billing",
        runtime=d.rt,
    )
    assert [(w.code, w.queue) for w in answer.warnings] == [("no_worker", d.rt.settings.queue)]


def celery(d: Doors) -> None:
    unattended(d)
    fields = {"tenant": tenant_name(), "idempotency_key": f"celery-{secrets.token_hex(4)}"}
    answer = submit_from_message(
        as_message({**fields, "provider": "sandbox", "command": COMMAND, "requested_by": "etl"})
    )
    assert [w["code"] for w in answer["warnings"]] == ["no_worker"], answer


def http(d: Doors) -> None:
    unattended(d)
    secret = d.token(tenant_name(), "svc")
    key = f"http-{secrets.token_hex(4)}"
    with d.http(secret) as client:
        created = client.post(
            "/v1/operations",
            json={"provider": "sandbox", "command": COMMAND},
            headers={"Idempotency-Key": key},
        )
    assert created.status_code == 201, created.text
    assert [w["code"] for w in created.json()["warnings"]] == ["no_worker"]
    assert created.headers["Jobwarden-Warning"] == "no_worker"


def mcp(d: Doors) -> None:
    unattended(d)
    secret = d.token(tenant_name(), "agent")
    key = f"mcp-{secrets.token_hex(4)}"
    (started,) = d.mcp(
        secret,
        ("start_operation", {"operation_key": key, "provider": "sandbox", "command": COMMAND}),
    )
    warnings = tool_answer(started)["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("no_worker: "), warnings


def cli(d: Doors) -> None:
    unattended(d)
    tenant = tenant_name()
    done = d.cli(
        "submit",
        "sandbox",
        '{"kind": "export"}',
        "--key",
        f"cli-{secrets.token_hex(4)}",
        "--tenant",
        tenant,
        env={"JOBWARDEN_TOKEN": d.token(tenant, "ops")},
    )
    assert done.returncode == 0, done.stderr
    assert [w["code"] for w in json.loads(done.stdout)["warnings"]] == ["no_worker"]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: no worker has consumed"), lines


def console(d: Doors) -> None:
    unattended(d)
    tenant = tenant_name()
    with d.console(d.token(tenant, "oncall")) as client:
        queue = client.get("/console/")
    assert queue.status_code == 200
    assert "No workers running" in queue.text


def resubmit(d: Doors) -> None:
    unattended(d)
    old = insert_operation(d.url, tenant_name(), S.failed)
    decided = decide_escalation(str(old), "resubmit", "dana", "fixed upstream", runtime=d.rt)
    assert decided.resubmitted_as is not None
    assert [w.code for w in getattr(decided, "warnings", ())] == ["no_worker"]
