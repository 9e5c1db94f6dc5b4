"""Immutable references through every door (issue 40): a command field its schema marks
``x-jobwarden-immutable-reference`` refuses a branch, tag or short id before anything is
stored, naming the field (HTTP: 422 with the JSON pointer), and the refusal is logged as
invalid; what is accepted is shown to the approver as a reference, apart from the body.
The contract is the matrix's ``matrix_deploy`` (doors.DEPLOY_SCHEMA).
"""

from __future__ import annotations

import json
import secrets
from datetime import timedelta
from typing import Any

import pytest

from jobwarden.models.errors import InvalidCommandError
from jobwarden.models.states import OperationState as S
from jobwarden.tasks import runtime as runtime_module
from jobwarden.tasks.humans.interventions import decide_escalation
from jobwarden.tasks.intake import submit_from_message, submit_operation
from jobwarden.tasks.runtime import utcnow
from jobwarden.tasks.schedules import tick_once
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import (
    DEPLOY,
    Doors,
    as_message,
    csrf,
    tool_answer,
    tool_error,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
IMAGE = "registry.example.com/team/app@sha256:" + "ab" * 32
GOOD: dict[str, Any] = {"deploy": {"commit": COMMIT, "images": [IMAGE]}}
# (command, the field the refusal names, its JSON pointer)
MUTABLE: list[tuple[dict[str, Any], str, str]] = [
    ({"deploy": {"commit": "main"}}, "command.deploy.commit", "/command/deploy/commit"),
    (
        {"deploy": {"commit": COMMIT, "images": [IMAGE, "registry.example.com/app:latest"]}},
        "command.deploy.images[1]",
        "/command/deploy/images/1",
    ),
]


def _fields(tenant: str, command: dict[str, Any]) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "provider": DEPLOY,
        "idempotency_key": f"k-{secrets.token_hex(4)}",
        "command": command,
        "requested_by": "release",
    }


def _nothing_but_refusals(d: Doors, tenant: str, count: int) -> None:
    entries = d.intake_of_tenant(tenant)
    assert [e.outcome for e in entries] == ["invalid"] * count, entries
    assert all(e.operation_id is None for e in entries), entries


def python(d: Doors) -> None:
    tenant = tenant_name()
    for command, field, _ in MUTABLE:
        with pytest.raises(InvalidCommandError) as refused:
            submit_operation(**_fields(tenant, command), runtime=d.rt)
        assert str(refused.value).startswith(f"{field}: "), str(refused.value)
        assert "immutable reference" in str(refused.value)
    _nothing_but_refusals(d, tenant, len(MUTABLE))
    # The reference is in the fingerprint: the same key with another commit is a conflict.
    first = _fields(tenant, GOOD)
    assert submit_operation(**first, runtime=d.rt).outcome == "created"
    moved = {"deploy": {"commit": "f" * 40, "images": [IMAGE]}}
    again = submit_operation(**{**first, "command": moved}, runtime=d.rt)
    assert again.outcome == "conflict", again
    assert d.find(tenant, first["idempotency_key"]).command == GOOD  # type: ignore[union-attr]


def celery(d: Doors) -> None:
    tenant = tenant_name()
    # The worker's runtime knows the matrix's contracts, as a worker started with them would.
    with pytest.MonkeyPatch.context() as env:
        env.setattr(runtime_module, "_runtime", d.rt)
        for command, field, _ in MUTABLE:
            answer = submit_from_message(as_message(_fields(tenant, command)))
            assert answer["outcome"] == "invalid", answer
            assert answer["error"].startswith(f"{field}: "), answer
    _nothing_but_refusals(d, tenant, len(MUTABLE))


def http(d: Doors) -> None:
    tenant = tenant_name()
    secret = d.token(tenant, "svc")
    with d.http(secret) as client:
        for command, field, pointer in MUTABLE:
            answer = client.post(
                "/v1/operations",
                json={"provider": DEPLOY, "command": command},
                headers={"Idempotency-Key": secrets.token_hex(4)},
            )
            assert answer.status_code == 422, answer.text
            (error,) = answer.json()["errors"]
            assert error["path"] == pointer and error["message"].startswith(field), error
        _nothing_but_refusals(d, tenant, len(MUTABLE))
        key = secrets.token_hex(4)
        body = {"provider": DEPLOY, "command": GOOD}
        created = client.post("/v1/operations", json=body, headers={"Idempotency-Key": key})
        assert created.status_code == 201, created.text
        moved = {"provider": DEPLOY, "command": {"deploy": {"commit": "e" * 40}}}
        conflict = client.post("/v1/operations", json=moved, headers={"Idempotency-Key": key})
        # A changed reference under the same key: conflict (422 over HTTP, DESIGN "Intake").
        assert conflict.status_code == 422, conflict.text
        assert conflict.json()["type"].endswith("/idempotency_key_reused"), conflict.text
        # The approval's view of the create names the references apart from the body.
        view = client.get(f"/v1/operations/{created.json()['operation_id']}").json()
    assert view["create_request"]["references"] == [
        {"path": "/command/deploy/commit", "value": COMMIT, "kind": "git_commit"},
        {"path": "/command/deploy/images/0", "value": IMAGE, "kind": "oci_digest"},
    ]


def mcp(d: Doors) -> None:
    tenant = tenant_name()
    calls = [
        ("start_operation", {"operation_key": f"k{i}", "provider": DEPLOY, "command": command})
        for i, (command, _, _) in enumerate(MUTABLE)
    ]
    answers = d.mcp(d.token(tenant, "agent"), *calls)
    for answer, (_, field, _) in zip(answers, MUTABLE, strict=True):
        text = tool_error(answer)
        assert f"{field}: " in text and "immutable reference" in text, text
    _nothing_but_refusals(d, tenant, len(MUTABLE))
    start = {"operation_key": "good", "provider": DEPLOY, "command": GOOD}
    (started,) = d.mcp(d.token(tenant, "agent2"), ("start_operation", start))
    op = tool_answer(started)["operation_id"]
    (got,) = d.mcp(d.token(tenant, "agent3"), ("get_operation", {"operation_id": op}))
    references = tool_answer(got)["create_request"]["references"]
    assert [r["value"] for r in references] == [COMMIT, IMAGE], references


def cli(d: Doors) -> None:
    tenant = tenant_name()
    secret = d.token(tenant, "ops")
    env = {"JOBWARDEN_TOKEN": secret}
    for command, field, _ in MUTABLE:
        done = d.cli("submit", DEPLOY, json.dumps(command), "--key", secrets.token_hex(4), env=env)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert f"{field}: " in done.stderr and "Traceback" not in done.stderr, done.stderr
    _nothing_but_refusals(d, tenant, len(MUTABLE))
    key = secrets.token_hex(4)
    done = d.cli("submit", DEPLOY, json.dumps(GOOD), "--key", key, env=env)
    assert done.returncode == 0, done.stderr
    op = d.find(tenant, key)
    assert op is not None and op.state is S.awaiting_approval
    shown = d.cli("show", str(op.operation_id), env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"reference        /command/deploy/commit -> {COMMIT} (git_commit)" in shown.stdout
    assert f"/command/deploy/images/0 -> {IMAGE} (oci_digest)" in shown.stdout
    record = json.loads(d.cli("show", str(op.operation_id), "--json", env=env).stdout)
    assert record["request"]["references"][0] == {
        "path": "/command/deploy/commit",
        "value": COMMIT,
        "kind": "git_commit",
    }


def console(d: Doors) -> None:
    tenant = tenant_name()
    op = submit_operation(**_fields(tenant, GOOD), runtime=d.rt).operation_id
    assert op is not None and d.load(op).state is S.awaiting_approval
    with d.console(d.token(tenant, "approver")) as client:
        page = client.get(f"/console/operations/{op}").text
    assert 'id="references"' in page, page
    block = page.split('id="references"', 1)[1].split("</table>", 1)[0]
    assert f"<code>{COMMIT}</code>" in block and "git_commit" in block, block
    assert f"<code>{IMAGE}</code>" in block and "oci_digest" in block, block
    csrf(page)  # the approval form is offered beside them


def schedules(d: Doors) -> None:
    tenant, name = tenant_name(), f"deploys-{secrets.token_hex(3)}"
    table = {"interval_seconds": 60, "provider": DEPLOY, "command": {"deploy": {"commit": "v1.2"}}}
    with d.http(d.token(tenant, "alice")) as client:
        answer = client.put(f"/v1/schedules/{name}", json=table)
        assert answer.status_code == 422, answer.text
        assert "command.deploy.commit: " in answer.json()["detail"], answer.text
        assert client.get(f"/v1/schedules/{name}").status_code == 404
    tick_once(d.rt, clock=lambda: utcnow() + timedelta(seconds=61))
    assert d.intake_of_tenant(tenant) == []


def resubmit(d: Doors) -> None:
    tenant = tenant_name()
    # Created before its contract marked the field (a pinned older contract): the person's
    # resubmission goes through today's intake, which refuses the moving name.
    old = insert_operation(
        d.url, tenant, S.failed, provider=DEPLOY, command={"deploy": {"commit": "main"}}
    )
    with pytest.raises(InvalidCommandError) as refused:
        decide_escalation(str(old), "resubmit", "dana", "retry the deploy", runtime=d.rt)
    assert str(refused.value).startswith("command.deploy.commit: "), str(refused.value)
    assert d.load(old).resubmitted_as is None
    assert [e.outcome for e in d.intake(tenant, f"resubmit:{old}")] == ["invalid"]
