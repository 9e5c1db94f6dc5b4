"""A human approves exactly what will be sent (DESIGN.md invariant 13, issue 33 finding 3):
through each approving door the approval records the digest of the create as shown, an
approval naming another digest is refused, and a send whose request changed is refused.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from jobwarden.config.settings import Settings
from jobwarden.models.history.chain import EventKind
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import CREATE
from jobwarden.tasks import runtime as runtime_module
from jobwarden.tasks.humans.interventions import approve
from jobwarden.tasks.pipeline import run_step
from jobwarden.tasks.runtime import build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import ONE, Doors, csrf

OTHER_DIGEST = "0" * 64


def _waiting(d: Doors, tenant: str, provider: str = ONE) -> tuple[uuid.UUID, str]:
    op = insert_operation(d.url, tenant, S.awaiting_approval, provider=provider, requested_by="al")
    return op, d.load(op).request_fingerprint


def _bound(d: Doors, op: uuid.UUID) -> str:
    """The digest the approval bound: on the row, and in the approval's event."""
    digest = getattr(d.load(op), "approved_request_digest", None)
    assert isinstance(digest, str) and len(digest) == 64, digest
    (approved,) = [e.draft for e in d.events(op) if e.draft.kind is EventKind.approved]
    assert (approved.excerpt or {}).get("request_digest") == digest
    return digest


def _shown(view: dict[str, Any]) -> str:
    """The digest the HTTP view shows beside the create request it binds."""
    shown = view["create_request"]
    digest = shown.get("request_digest") or shown.get("digest")
    assert isinstance(digest, str), shown
    return digest


def python(d: Doors) -> None:
    op, fingerprint = _waiting(d, tenant_name())
    assert approve(str(op), fingerprint, "bob", runtime=d.rt) == "create_pending"
    digest = _bound(d, op)
    # The provider's base URL moves (its contract's base_url_env) before the send: the
    # worker that sends started after the change.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("JOBWARDEN_SANDBOX_URL", "http://127.0.0.1:9")
        worker = build_runtime(Settings(providers_dir=d.providers))
        env.setattr(runtime_module, "_runtime", worker)
        try:
            assert run_step(str(op), CREATE) == S.awaiting_approval.value
        finally:
            close_runtime(worker)
            worker.redis.close()
    stale = d.events(op)[-1].draft
    assert stale.kind.value == "approval_stale", stale
    assert (stale.excerpt or {}).get("approved_request_digest") == digest
    assert (stale.excerpt or {}).get("request_digest") not in (None, digest)
    row = d.load(op)
    assert (row.remote_job_id, row.create_attempts) == (None, 0)  # nothing left


def http(d: Doors) -> None:
    tenant = tenant_name()
    op, fingerprint = _waiting(d, tenant)
    with d.http(d.token(tenant, "bob")) as client:
        shown = _shown(client.get(f"/v1/operations/{op}").json())
        path = f"/v1/operations/{op}/approvals"
        other = client.post(path, json={"fingerprint": fingerprint, "request_digest": OTHER_DIGEST})
        assert other.status_code == 409 and "request_digest" in other.text, other.text
        assert d.load(op).state is S.awaiting_approval
        done = client.post(path, json={"fingerprint": fingerprint, "request_digest": shown})
    assert done.status_code == 200, done.text
    assert _bound(d, op) == shown


def cli(d: Doors) -> None:
    tenant = tenant_name()
    op, fingerprint = _waiting(d, tenant)
    with d.http(d.token(tenant, "reader", ("read",))) as client:
        shown = _shown(client.get(f"/v1/operations/{op}").json())
    bob = {"JOBWARDEN_TOKEN": d.token(tenant, "bob")}
    args = ["approve", str(op), "--fingerprint", fingerprint, "--request-digest"]
    other = d.cli(*args, OTHER_DIGEST, env=bob)
    assert other.returncode != 0 and "request_digest" in other.stderr.replace("-", "_")
    assert d.load(op).state is S.awaiting_approval
    done = d.cli(*args, shown, env=bob)
    assert done.returncode == 0, done.stderr
    assert _bound(d, op) == shown


def console(d: Doors) -> None:
    tenant = tenant_name()
    op, fingerprint = _waiting(d, tenant)
    page = f"/console/operations/{op}"
    with d.console(d.token(tenant, "bob")) as client:
        html = client.get(page).text
        posted = re.search(r'name="request_digest" value="([0-9a-f]{64})"', html)
        assert posted is not None, "the approval form binds the digest it shows"
        shown = posted.group(1)
        assert html.count(shown) >= 2, "the page shows the digest it binds"
        form = {"csrf": csrf(html), "fingerprint": fingerprint}
        other = client.post(f"{page}/approvals", data={**form, "request_digest": OTHER_DIGEST})
        assert other.status_code == 409, other.text
        done = client.post(f"{page}/approvals", data={**form, "request_digest": shown})
    assert done.status_code == 303, done.text
    assert _bound(d, op) == shown


def resubmit(d: Doors) -> None:
    tenant = tenant_name()
    old = insert_operation(d.url, tenant, S.failed, provider=ONE, authorized_by="bob")
    with d.http(d.token(tenant, "oncall")) as client:
        answer = client.post(
            f"/v1/operations/{old}/decisions", json={"option": "resubmit", "note": "fixed"}
        )
    assert answer.status_code == 200, answer.text
    new = d.load(answer.json()["resubmitted_as"])
    # The replaced operation's approval does not carry over: the new request waits for its own.
    assert (new.state, new.authorized_by) == (S.awaiting_approval, None)
    assert getattr(new, "approved_request_digest", None) is None
    kinds = [e.draft.kind for e in d.events(new.operation_id)]
    assert EventKind.approved not in kinds and EventKind.approval_recorded not in kinds
