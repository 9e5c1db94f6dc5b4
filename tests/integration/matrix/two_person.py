"""The two-person rule through every door that approves (DESIGN.md "Humans", invariant
15): two distinct principals, neither the submitter nor whoever it was submitted on
behalf of; one principal approving twice never makes two.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from jobwarden.models.errors import AnotherApproverNeededError
from jobwarden.models.humans.identity import Author, token_author
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.humans.interventions import approve
from jobwarden.tasks.runtime import utcnow
from jobwarden.tasks.schedules import tick_once
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import TWO, Doors, csrf


def _waiting(d: Doors, tenant: str, submitter: str = "alice") -> tuple[uuid.UUID, str]:
    op = insert_operation(d.url, tenant, S.awaiting_approval, provider=TWO, requested_by=submitter)
    return op, d.load(op).request_fingerprint


def _over_http(d: Doors, op: uuid.UUID, fingerprint: str, secret: str) -> tuple[int, str]:
    with d.http(secret) as client:
        answer = client.post(f"/v1/operations/{op}/approvals", json={"fingerprint": fingerprint})
    kind = answer.json().get("type", "").rsplit("/", 1)[-1] if answer.status_code >= 400 else ""
    return answer.status_code, kind


def python(d: Doors) -> None:
    op, fingerprint = _waiting(d, tenant_name())
    alice, bob, carol = (token_author(n, token_id=uuid.uuid4()) for n in ("alice", "bob", "carol"))

    def refused(who: Author | str) -> str:
        with pytest.raises(AnotherApproverNeededError) as refusal:
            approve(str(op), fingerprint, who, runtime=d.rt)
        return refusal.value.reason

    assert refused(alice) == "self_approval_refused"
    assert approve(str(op), fingerprint, bob, runtime=d.rt) == "awaiting_approval"
    assert refused(bob) == "same_approver"
    # A name the caller types is no principal: it never counts toward the rule.
    assert refused("dave") == "approver_not_counted"
    assert d.load(op).state is S.awaiting_approval
    assert approve(str(op), fingerprint, carol, runtime=d.rt) == "create_pending"


def http(d: Doors) -> None:
    tenant = tenant_name()
    op, fingerprint = _waiting(d, tenant)
    alice, bob, carol = (d.token(tenant, n) for n in ("alice", "bob", "carol"))
    assert _over_http(d, op, fingerprint, alice) == (403, "self_approval_refused")
    assert _over_http(d, op, fingerprint, bob) == (200, "")
    assert _over_http(d, op, fingerprint, bob) == (409, "same_approver")
    assert d.load(op).state is S.awaiting_approval
    assert _over_http(d, op, fingerprint, carol) == (200, "")
    assert d.load(op).state is S.create_pending


def cli(d: Doors) -> None:
    tenant = tenant_name()
    op, fingerprint = _waiting(d, tenant)
    for name in ("bob", "mallory"):
        d.cli("approve", str(op), "--fingerprint", fingerprint, "--approver", name)
    assert d.load(op).state is S.awaiting_approval
    bob = {"JOBWARDEN_TOKEN": d.token(tenant, "bob")}
    first = d.cli("approve", str(op), "--fingerprint", fingerprint, env=bob)
    assert first.returncode == 0, first.stderr
    again = d.cli("approve", str(op), "--fingerprint", fingerprint, env=bob)
    assert again.returncode != 0 and "Traceback" not in again.stderr
    assert d.load(op).state is S.awaiting_approval


def console(d: Doors) -> None:
    tenant = tenant_name()
    op, fingerprint = _waiting(d, tenant)
    page = f"/console/operations/{op}"

    def post(name: str) -> int:
        with d.console(d.token(tenant, name)) as client:
            form = {"csrf": csrf(client.get(page).text), "fingerprint": fingerprint}
            return client.post(f"{page}/approvals", data=form).status_code

    assert post("alice") == 403
    assert post("bob") == 303
    assert post("bob") == 409
    assert d.load(op).state is S.awaiting_approval


def schedules(d: Doors) -> None:
    tenant, name = tenant_name(), f"payroll-{secrets.token_hex(3)}"
    folder = d.providers.parent / f"schedules-{secrets.token_hex(3)}"
    folder.mkdir()
    Path(folder / f"{tenant}.toml").write_text(
        f'tenant = "{tenant}"\n\n[schedules.{name}]\ninterval_seconds = 60\n'
        f'provider = "{TWO}"\ncommand = {{ at = "{{slot}}" }}\n'
    )
    alice = d.token(tenant, "alice")
    synced = d.cli("schedules", "sync", "--dir", str(folder), env={"JOBWARDEN_TOKEN": alice})
    assert synced.returncode == 0, synced.stderr
    tick_once(d.rt, clock=lambda: utcnow() + timedelta(seconds=61))
    fired = [e for e in d.intake_of_tenant(tenant) if e.operation_id is not None]
    assert len(fired) == 1, fired
    op = fired[0].operation_id
    assert op is not None
    fingerprint = d.load(op).request_fingerprint
    # The schedule's author is whom it was submitted for: never one of the two.
    assert _over_http(d, op, fingerprint, alice)[0] == 403
    assert _over_http(d, op, fingerprint, d.token(tenant, "bob")) == (200, "")
    assert _over_http(d, op, fingerprint, alice)[0] == 403
    assert d.load(op).state is S.awaiting_approval


def resubmit(d: Doors) -> None:
    tenant = tenant_name()
    old = insert_operation(d.url, tenant, S.failed, provider=TWO)
    oncall = d.token(tenant, "oncall")
    with d.http(oncall) as client:
        answer = client.post(
            f"/v1/operations/{old}/decisions", json={"option": "resubmit", "note": "fixed"}
        )
    assert answer.status_code == 200, answer.text
    new = uuid.UUID(answer.json()["resubmitted_as"])
    assert d.load(new).state is S.awaiting_approval
    fingerprint = d.load(new).request_fingerprint
    # Whoever resubmits is the new operation's submitter: not one of its approvers.
    assert _over_http(d, new, fingerprint, oncall) == (403, "self_approval_refused")
    assert _over_http(d, new, fingerprint, d.token(tenant, "bob")) == (200, "")
    assert d.load(new).state is S.awaiting_approval
