"""Issue 33 finding 3: what was approved is what is sent (DESIGN invariant 13).

The approval is given where the contract's ``base_url_env`` names one sandbox provider
(the approver's process showed ``POST <old>/v1/jobs``); the worker that runs the create
step starts after the variable changed and would send to another. Against the real
database, Redis and two sandbox servers over HTTP, through the worker's own step
(``pipeline.run_step``): no request reaches either provider, the history records
``approval_stale`` with both digests, and the operation waits for a new approval; the new
approval, of the request as it now leaves, sends it there once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from jobwarden.cli.main import app
from jobwarden.config.settings import Settings
from jobwarden.demo.harness import REPO
from jobwarden.demo.sandbox.server import SandboxServer
from jobwarden.models.errors import RequestDigestMismatchError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.identity import token_author
from jobwarden.models.intake.submission import SubmissionRequest
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import engine_for, transaction
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import CREATE, RECONCILE
from jobwarden.tasks import pipeline
from jobwarden.tasks import runtime as runtime_module
from jobwarden.tasks.humans.interventions import approve
from jobwarden.tasks.intake import submit_request
from jobwarden.tasks.provider.edge import shown_create_request
from jobwarden.tasks.runtime import Runtime, build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from tests.api_server import serving
from tests.integration.api_helpers import load, make_token, tenant_name
from tests.integration.test_cli import _cli
from tests.integration.test_console import _csrf, _token, login

BOUND = "sandbox_bound"
TWO = "sandbox_bound_two"
TOKEN = "sandbox-binding-token"
URL_ENV = "JOBWARDEN_SANDBOX_URL"


@pytest.fixture(scope="module")
def providers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped sandbox contract (its base URL from the env), needing an approval, and
    a copy needing two."""
    folder = tmp_path_factory.mktemp("binding_providers")
    base = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    for name, rule in ((BOUND, "requires_approval = true"), (TWO, "approvals_required = 2")):
        text = base.replace('name = "sandbox"', f'name = "{name}"')
        (folder / f"{name}.toml").write_text(text.replace("requires_approval = false", rule))
    return folder


@pytest.fixture
def servers() -> Iterator[tuple[SandboxServer, SandboxServer]]:
    with SandboxServer(token=TOKEN) as approved_at, SandboxServer(token=TOKEN) as moved_to:
        yield approved_at, moved_to


def _runtime(providers: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> Runtime:
    """A process started with ``base_url_env`` holding ``url`` (resolved once, at start)."""
    monkeypatch.setenv(URL_ENV, url)
    monkeypatch.setenv("JOBWARDEN_SANDBOX_TOKEN", TOKEN)
    return build_runtime(Settings(providers_dir=providers))


@pytest.fixture
def processes(
    providers: Path,
    servers: tuple[SandboxServer, SandboxServer],
    monkeypatch: pytest.MonkeyPatch,
    database_url: str,
) -> Iterator[tuple[Runtime, Runtime]]:
    """The approver's process (old URL) and a worker started after the change (new URL),
    installed as this process's worker runtime so ``run_step`` is the worker's own path."""
    approver = _runtime(providers, servers[0].url, monkeypatch)
    worker = _runtime(providers, servers[1].url, monkeypatch)
    monkeypatch.setattr(runtime_module, "_runtime", worker)
    yield approver, worker
    monkeypatch.setattr(runtime_module, "_runtime", None)
    close_runtime(approver)
    close_runtime(worker)


def _submitted(
    rt: Runtime, provider: str = BOUND, tenant: str | None = None, **behaviour: object
) -> uuid.UUID:
    made = submit_request(
        SubmissionRequest(
            tenant=tenant or tenant_name(),
            requested_by="alice",
            provider=provider,
            command={"kind": "export", "behaviour": {"polls_to_finish": 1, **behaviour}},
            idempotency_key=f"binding-{uuid.uuid4().hex}",
        ),
        door="python",
        runtime=rt,
    )
    assert made.state == S.awaiting_approval.value and made.operation_id is not None
    return uuid.UUID(made.operation_id)


def _events(database_url: str, op: uuid.UUID) -> list[tuple[EventKind, dict[str, object]]]:
    with transaction(database_url) as session:
        return [(e.draft.kind, dict(e.draft.excerpt or {})) for e in store.events_for(session, op)]


def test_a_create_whose_base_url_changed_after_the_approval_is_not_sent_and_needs_a_new_one(
    database_url: str,
    processes: tuple[Runtime, Runtime],
    servers: tuple[SandboxServer, SandboxServer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    approver, worker = processes
    approved_at, moved_to = servers
    op = _submitted(approver)
    row = load(database_url, op)
    shown = shown_create_request(approver.context(BOUND), row)
    assert shown.url == f"{approved_at.url}/v1/jobs"
    state = approve(
        str(op), row.request_fingerprint, "bob", runtime=approver, request_digest=shown.digest
    )
    assert state == S.create_pending.value
    assert load(database_url, op).approved_request_digest == shown.digest

    # The worker, started with the new URL, runs the create step.
    assert pipeline.run_step(str(op), CREATE) == S.awaiting_approval.value
    assert moved_to.requests() == [] and approved_at.requests() == []  # nothing left
    stopped = load(database_url, op)
    assert stopped.state is S.awaiting_approval
    assert stopped.create_attempts == 0 and stopped.approved_request_digest is None
    assert stopped.authorized_by is None and stopped.approval_expires_at is None
    assert stopped.next_poll_at is not None  # a fresh approval window, then approval_expired
    kind, excerpt = _events(database_url, op)[-1]
    now_leaving = shown_create_request(worker.context(BOUND), stopped)
    assert kind is EventKind.approval_stale
    named = ("reason", "approved_request_digest", "request_digest", "request")
    assert {name: excerpt[name] for name in named} == {
        "reason": "approval_stale",
        "approved_request_digest": shown.digest,
        "request_digest": now_leaving.digest,
        "request": f"POST {moved_to.url}/v1/jobs",
    }

    # An approver still looking at the old page names the old digest: refused.
    with pytest.raises(RequestDigestMismatchError):
        approve(
            str(op), row.request_fingerprint, "bob", runtime=worker, request_digest=shown.digest
        )
    # Approving the request as it now leaves sends it, once, there.
    assert (
        approve(
            str(op),
            row.request_fingerprint,
            "bob",
            runtime=worker,
            request_digest=now_leaving.digest,
        )
        == S.create_pending.value
    )
    assert pipeline.run_step(str(op), CREATE) == S.accepted.value
    assert [r["idempotency_key"] for r in moved_to.requests()] == [row.provider_token]
    assert approved_at.requests() == []

    history = CliRunner().invoke(app, ["history", str(op)])
    assert history.exit_code == 0, history.output
    assert f"approval stale: the create to send, POST {moved_to.url}/v1/jobs" in history.output
    with capsys.disabled():
        print(f"\n$ jobwarden history {op}\n{history.output}")


def test_under_the_two_person_rule_approvals_of_different_requests_do_not_add_up(
    database_url: str,
    processes: tuple[Runtime, Runtime],
    servers: tuple[SandboxServer, SandboxServer],
) -> None:
    """bob approved the request as the old process showed it; carol the one that leaves
    now: they approved different requests, so carol's is the first of a new pair."""
    approver, worker = processes
    op = _submitted(approver, TWO)
    fingerprint = load(database_url, op).request_fingerprint
    bob, carol, dave = (token_author(n) for n in ("bob", "carol", "dave"))
    assert approve(str(op), fingerprint, bob, runtime=approver) == S.awaiting_approval.value
    assert approve(str(op), fingerprint, carol, runtime=worker) == S.awaiting_approval.value
    recorded = [ex for kind, ex in _events(database_url, op) if kind is EventKind.approval_recorded]
    assert len(recorded) == 2 and recorded[0]["request_digest"] != recorded[1]["request_digest"]
    assert approve(str(op), fingerprint, dave, runtime=worker) == S.create_pending.value
    assert pipeline.run_step(str(op), CREATE) == S.accepted.value
    assert len(servers[1].requests()) == 1 and servers[0].requests() == []


def test_a_reconciliation_that_would_resend_the_create_elsewhere_stops_for_a_person(
    database_url: str,
    processes: tuple[Runtime, Runtime],
    servers: tuple[SandboxServer, SandboxServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The approved create left and its answer was lost (create_unknown); the worker that
    reconciles (same-token retry) was started with another URL. A resend there could make
    a second job: nothing is sent, the operation escalates approval_stale."""
    approver, worker = processes
    approved_at, moved_to = servers
    op = _submitted(approver, create_response="drop")
    approve(str(op), load(database_url, op).request_fingerprint, "bob", runtime=approver)
    monkeypatch.setattr(runtime_module, "_runtime", approver)
    assert pipeline.run_step(str(op), CREATE) == S.create_unknown.value
    assert len(approved_at.requests()) == 1
    # The reconciliation's time has come (a timer, not a bound fact: as the clock moving).
    with engine_for(database_url).begin() as conn:
        conn.execute(
            text("UPDATE operation_timers SET next_poll_at = now() WHERE operation_id = :id"),
            {"id": op},
        )
    monkeypatch.setattr(runtime_module, "_runtime", worker)
    assert pipeline.run_step(str(op), RECONCILE) == S.escalated.value
    assert moved_to.requests() == [] and len(approved_at.requests()) == 1
    stopped = load(database_url, op)
    assert stopped.escalation_reason == "approval_stale"
    assert stopped.escalation_detail is not None and moved_to.url in stopped.escalation_detail


# --- every door that approves names the digest it showed ------------------------------


@pytest.fixture
def api(providers: Path, processes: tuple[Runtime, Runtime]) -> Iterator[str]:
    """The API and console of a process started with the current URL (the worker's)."""
    from jobwarden.console.app import create_app

    with serving(create_app(Settings(providers_dir=providers))) as url:
        yield url


def _approval_events(database_url: str, op: uuid.UUID) -> list[EventKind]:
    approvals = (EventKind.approved, EventKind.approval_recorded)
    return [kind for kind, _ in _events(database_url, op) if kind in approvals]


def test_over_http_the_view_names_the_digest_and_an_approval_of_another_is_a_409(
    database_url: str, processes: tuple[Runtime, Runtime], api: str
) -> None:
    approver, worker = processes
    tenant = tenant_name()
    op = _submitted(approver, tenant=tenant)
    bob = make_token(database_url, tenant, "bob", ["read", "approve"])
    expected = shown_create_request(worker.context(BOUND), load(database_url, op)).digest
    with httpx.Client(base_url=api, timeout=30) as client:
        view = client.get(f"/v1/operations/{op}", headers=bob).json()["create_request"]
        assert view["request_digest"] == expected
        assert view["credential_from"] == "env:JOBWARDEN_SANDBOX_TOKEN"
        body = {"fingerprint": view["fingerprint"], "request_digest": "0" * 64}
        refused = client.post(f"/v1/operations/{op}/approvals", json=body, headers=bob)
        assert refused.status_code == 409, refused.text
        problem = refused.json()
        assert problem["type"].endswith("/request_digest_mismatch")
        assert [e["path"] for e in problem["errors"]] == ["request_digest"]
        assert expected in problem["detail"]
        assert _approval_events(database_url, op) == []  # nothing written
        body["request_digest"] = expected
        approved = client.post(f"/v1/operations/{op}/approvals", json=body, headers=bob)
        assert approved.status_code == 200, approved.text
    assert load(database_url, op).approved_request_digest == expected


def test_the_console_shows_the_digest_it_binds_and_posts_it(
    database_url: str, processes: tuple[Runtime, Runtime], api: str
) -> None:
    approver, worker = processes
    tenant = tenant_name()
    op = _submitted(approver, tenant=tenant)
    expected = shown_create_request(worker.context(BOUND), load(database_url, op)).digest
    token = _token(database_url, tenant, "bob", ["read", "approve"])
    with login(api, token) as client:
        page = client.get(f"/console/operations/{op}").text
        assert f'<code id="request-digest">{expected}</code>' in page
        assert f'name="request_digest" value="{expected}"' in page
        form = {"csrf": _csrf(page), "fingerprint": load(database_url, op).request_fingerprint}
        stale = client.post(
            f"/console/operations/{op}/approvals", data={**form, "request_digest": "0" * 64}
        )
        assert stale.status_code == 409 and "request_digest" in stale.text
        assert _approval_events(database_url, op) == []
        fresh = client.post(
            f"/console/operations/{op}/approvals", data={**form, "request_digest": expected}
        )
        assert fresh.status_code == 303, fresh.text
    assert load(database_url, op).approved_request_digest == expected


def test_the_cli_approves_only_the_digest_it_names(
    database_url: str, providers: Path, processes: tuple[Runtime, Runtime]
) -> None:
    approver, worker = processes
    tenant = tenant_name()
    op = _submitted(approver, tenant=tenant)
    row = load(database_url, op)
    expected = shown_create_request(worker.context(BOUND), row).digest
    bob = _token(database_url, tenant, "bob", ["read", "approve"])
    env = {"JOBWARDEN_PROVIDERS_DIR": str(providers), "JOBWARDEN_TOKEN": bob}
    shown = _cli("show", str(op), env=env)
    assert f"request digest   {expected}" in shown.stdout, shown.stderr
    args = ["approve", str(op), "--fingerprint", row.request_fingerprint]
    refused = _cli(*args, "--request-digest", "0" * 64, env=env)
    assert refused.returncode == 2
    assert (
        refused.stderr.startswith("error: request_digest: ") and "Traceback" not in refused.stderr
    )
    assert _approval_events(database_url, op) == []
    approved = _cli(*args, env={**env, "JOBWARDEN_APPROVAL_REQUEST_DIGEST": expected})
    assert approved.returncode == 0, approved.stderr
    assert load(database_url, op).approved_request_digest == expected
