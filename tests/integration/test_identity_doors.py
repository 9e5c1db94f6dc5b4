"""One identity model for every door (issue 33, findings 1 and 2; DESIGN invariant 15),
against the real database and Redis: the CLI acts with a token or an explicit break-glass,
never a typed name, and what a schedule fires is submitted on behalf of its author, who
cannot approve it through any door (HTTP, console, Python, CLI).

Conventions: RFC 9457 problem details for HTTP refusals.
"""

from __future__ import annotations

import getpass
import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from jobwarden.api.auth import create_token
from jobwarden.config.settings import Settings
from jobwarden.demo.harness import REPO
from jobwarden.models.errors import AnotherApproverNeededError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.identity import token_author
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import OperationRow
from jobwarden.models.states import OperationState as S
from jobwarden.tasks import runtime as runtime_module
from jobwarden.tasks.humans.interventions import approve
from jobwarden.tasks.runtime import Runtime, build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from jobwarden.tasks.schedules import tick_once, trigger
from tests.api_server import serving
from tests.integration.api_helpers import insert_operation, load, make_token, tenant_name
from tests.integration.test_cli import _cli
from tests.integration.test_console import _token, login

TWO, ONE = "sandbox_two", "sandbox_one"
TYPE = "tag:jobwarden.dev,2026:problem/"


@pytest.fixture(scope="module")
def providers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped sandbox, and two copies that need approval: one approver, and two."""
    folder = tmp_path_factory.mktemp("identity_providers")
    base = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    (folder / "sandbox.toml").write_text(base)
    for name, rule in ((TWO, "approvals_required = 2"), (ONE, "requires_approval = true")):
        copy = base.replace('name = "sandbox"', f'name = "{name}"')
        (folder / f"{name}.toml").write_text(copy.replace("requires_approval = false", rule))
    return folder


@pytest.fixture(scope="module")
def rt(providers: Path, database_url: str) -> Iterator[Runtime]:
    built = build_runtime(Settings(providers_dir=providers))
    yield built
    close_runtime(built)
    built.redis.close()
    runtime_module.reset()


@pytest.fixture(scope="module")
def base_url(providers: Path, database_url: str) -> Iterator[str]:
    from jobwarden.console.app import create_app

    with serving(create_app(Settings(providers_dir=providers))) as url:
        yield url


def _cli_as(providers: Path, *args: str, token: str | None = None, **env: str):  # type: ignore[no-untyped-def]
    """The CLI as an operator runs it, with the test's contracts (and a token, if any)."""
    extra = {"JOBWARDEN_PROVIDERS_DIR": str(providers), **env}
    if token is not None:
        extra["JOBWARDEN_TOKEN"] = token
    return _cli(*args, env=extra)


def _token_of(database_url: str, tenant: str, name: str, *scopes: str) -> str:
    return create_token(database_url, tenant=tenant, name=name, scopes=scopes or ["approve"]).token


def _intent_excerpt(database_url: str, op: uuid.UUID) -> dict[str, object]:
    with transaction(database_url) as session:
        first = store.events_for(session, op)[0]
    assert first.draft.kind is EventKind.intent_recorded
    return dict(first.draft.excerpt or {})


def test_the_two_person_rule_cannot_be_met_from_one_shell_with_typed_names(
    database_url: str, providers: Path
) -> None:
    """Finding 1: `approve --approver alice`, then `--approver mallory`, went ahead."""
    tenant = tenant_name()
    op = insert_operation(
        database_url, tenant, S.awaiting_approval, provider=TWO, requested_by="alice"
    )
    fp = ["--fingerprint", load(database_url, op).request_fingerprint]
    for typed in (
        _cli_as(providers, "approve", str(op), *fp, "--approver", "mallory"),
        _cli_as(providers, "approve", str(op), *fp, JOBWARDEN_APPROVER="mallory"),
    ):
        assert typed.returncode == 2
        assert "--approver: a typed name is not an identity" in typed.stderr
        assert "Traceback" not in typed.stderr
    nobody = _cli_as(providers, "approve", str(op), *fp)
    assert nobody.returncode == 2 and "no identity: act with a token" in nobody.stderr
    # Break-glass is recorded as such and never counts toward the rule: refused here.
    glass = _cli_as(providers, "approve", str(op), *fp, "--break-glass", "bob is away")
    assert glass.returncode == 2 and "approver_not_counted" in glass.stderr
    bob = _token_of(database_url, tenant, "bob")
    assert _cli_as(providers, "approve", str(op), *fp, token=bob).stdout.strip() == (
        "awaiting_approval"
    )
    twice = _cli_as(providers, "approve", str(op), *fp, token=bob)
    assert twice.returncode == 2 and "same_approver" in twice.stderr
    # Another of bob's tokens is still bob: one principal, however many tokens.
    bob_again = _token_of(database_url, tenant, "bob")
    assert "same_approver" in _cli_as(providers, "approve", str(op), *fp, token=bob_again).stderr
    stranger = _token_of(database_url, tenant_name(), "eve")
    foreign = _cli_as(providers, "approve", str(op), *fp, token=stranger)
    assert foreign.returncode == 1 and f"no operation {op} for the token's tenant" in foreign.stderr
    reader = _token_of(database_url, tenant, "rita", "read")
    scoped = _cli_as(providers, "approve", str(op), *fp, token=reader)
    assert scoped.returncode == 2 and "needs the 'approve' scope" in scoped.stderr
    revoked = _cli_as(providers, "approve", str(op), *fp, token="jw_not-a-token")
    assert revoked.returncode == 2 and "unknown or revoked" in revoked.stderr
    assert load(database_url, op).state is S.awaiting_approval
    carol = _token_of(database_url, tenant, "carol")
    done = _cli_as(providers, "approve", str(op), *fp, token=carol)
    assert done.stdout.strip() == "create_pending", done.stderr
    assert load(database_url, op).authorized_by == "token:bob, token:carol"


def test_a_break_glass_approval_is_marked_in_the_history_and_logged_loudly(
    database_url: str, providers: Path
) -> None:
    op = insert_operation(database_url, tenant_name(), S.awaiting_approval, provider=ONE)
    fp = load(database_url, op).request_fingerprint
    reason = "API down, payroll due at noon"
    done = _cli_as(providers, "approve", str(op), "--fingerprint", fp, "--break-glass", reason)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "create_pending"
    actor = f"break-glass:{getpass.getuser()}"
    assert f"WARNING: break-glass: acting as {actor} without a token" in done.stderr
    assert load(database_url, op).authorized_by == actor
    history = _cli_as(providers, "history", str(op)).stdout
    print(history)  # the report shows a break-glass decision's history
    (line,) = [ln for ln in history.splitlines() if "approved" in ln]
    assert f"human:{actor}" in line
    assert f"[BREAK-GLASS, not counted toward a two-person rule: {reason}]" in line


def test_a_break_glass_resubmission_is_marked_in_the_intake_log(
    database_url: str, providers: Path
) -> None:
    old = insert_operation(database_url, tenant_name(), S.failed)
    done = _cli_as(
        providers, "decide", str(old), "resubmit", "--note", "rerun", "--break-glass", "no token"
    )
    assert done.returncode == 0, done.stderr
    new = load(database_url, old).resubmitted_as
    assert new is not None
    intake = [
        ln for ln in _cli_as(providers, "history", str(new)).stdout.splitlines() if "intake" in ln
    ]
    assert intake and f"actor=human:break-glass:{getpass.getuser()}" in intake[0]


def _declared_and_fired(
    client: httpx.Client,
    rt: Runtime,
    database_url: str,
    tenant: str,
    provider: str,
    by: dict[str, str],
) -> uuid.UUID:
    """alice declares a schedule over HTTP; beat's tick fires its next slot."""
    body = {
        "cron": "* * * * *",
        "provider": provider,
        "command": {"kind": "export", "at": "{slot}"},
    }
    made = client.put("/v1/schedules/payroll", json=body, headers=by)
    assert made.status_code == 201, made.text
    due = datetime.fromisoformat(made.json()["next_slot_at"]) + timedelta(seconds=1)
    tick_once(rt, clock=lambda: due)
    with transaction(database_url) as session:
        (op,) = session.scalars(
            select(OperationRow.operation_id).where(OperationRow.tenant == tenant)
        ).all()
    return op


def test_a_schedules_author_never_approves_what_it_fires_and_is_not_one_of_two(
    database_url: str, base_url: str, rt: Runtime
) -> None:
    """Finding 2: alice's schedule fired; alice approved it, and alice + bob made two."""
    tenant = tenant_name()
    # Even where the tenant lets a submitter approve its own operations.
    alice = make_token(
        database_url, tenant, "alice", ["submit", "read", "approve"], allow_self_approval=True
    )
    bob = make_token(database_url, tenant, "bob", ["approve"])
    carol = make_token(database_url, tenant, "carol", ["approve"])
    with httpx.Client(base_url=base_url, timeout=30) as client:
        op = _declared_and_fired(client, rt, database_url, tenant, TWO, alice)
        row = load(database_url, op)
        assert (row.state, row.requested_by) == (S.awaiting_approval, "token:alice")
        assert _intent_excerpt(database_url, op)["on_behalf_of"] == "token:alice"
        path = f"/v1/operations/{op}/approvals"
        body = {"fingerprint": row.request_fingerprint}
        refused = client.post(path, json=body, headers=alice)
        assert refused.status_code == 403, refused.text
        assert refused.json()["type"] == TYPE + "self_approval_refused"
        with pytest.raises(AnotherApproverNeededError) as python_door:
            approve(str(op), row.request_fingerprint, token_author("alice"), runtime=rt)
        assert python_door.value.reason == "self_approval_refused"
        with login(base_url, _token(database_url, tenant, "alice", ["read", "approve"])) as page:
            assert 'id="approve"' not in page.get(f"/console/operations/{op}").text
        first = client.post(path, json=body, headers=bob)
        assert first.status_code == 200 and first.json()["state"] == "awaiting_approval"
        assert client.post(path, json=body, headers=alice).status_code == 403
        second = client.post(path, json=body, headers=carol)
        assert second.status_code == 200 and second.json()["state"] == "create_pending"
    assert load(database_url, op).authorized_by == "token:bob, token:carol"


def test_a_triggered_slot_is_refused_to_both_who_triggered_it_and_the_schedules_author(
    database_url: str, base_url: str, rt: Runtime
) -> None:
    tenant = tenant_name()
    alice = make_token(
        database_url, tenant, "alice", ["submit", "read", "approve"], allow_self_approval=True
    )
    with httpx.Client(base_url=base_url, timeout=30) as client:
        body = {"cron": "0 3 * * *", "provider": ONE, "command": {"kind": "export", "at": "{slot}"}}
        assert client.put("/v1/schedules/payroll", json=body, headers=alice).status_code == 201
    op = uuid.UUID(str(trigger(rt, tenant, "payroll", actor="token:bob")))
    row = load(database_url, op)
    assert row.requested_by == "token:bob"
    assert _intent_excerpt(database_url, op)["on_behalf_of"] == "token:alice"
    # The author never (whatever the tenant allows); who triggered it as its submitter.
    for who in (token_author("alice", allows_self_approval=True), token_author("bob")):
        with pytest.raises(AnotherApproverNeededError) as refused:
            approve(str(op), row.request_fingerprint, who, runtime=rt)
        assert refused.value.reason == "self_approval_refused"
    assert (
        approve(str(op), row.request_fingerprint, token_author("carol"), runtime=rt)
        == "create_pending"
    )


def test_schedules_sync_makes_the_clis_token_principal_the_author(
    database_url: str, providers: Path, tmp_path: Path, rt: Runtime
) -> None:
    tenant = tenant_name()
    (tmp_path / "payroll.toml").write_text(
        f'tenant = "{tenant}"\n\n[schedules.payroll]\ncron = "0 3 * * *"\nprovider = "{ONE}"\n'
        'command = { kind = "export", at = "{slot}" }\n'
    )
    ana = _token_of(database_url, tenant, "ana", "submit")
    synced = _cli_as(providers, "schedules", "sync", "--dir", str(tmp_path), token=ana)
    assert synced.returncode == 0, synced.stderr
    op = uuid.UUID(str(trigger(rt, tenant, "payroll", actor="token:bob")))
    assert _intent_excerpt(database_url, op)["on_behalf_of"] == "token:ana"
    with pytest.raises(AnotherApproverNeededError):
        approve(
            str(op), load(database_url, op).request_fingerprint, token_author("ana"), runtime=rt
        )
    listed = json.loads(
        _cli_as(providers, "schedules", "list", "--tenant", tenant, "--json").stdout
    )
    assert [s["name"] for s in listed] == ["payroll"]


def test_the_cli_submits_as_its_tokens_principal_who_then_cannot_approve_it(
    database_url: str, providers: Path
) -> None:
    tenant = tenant_name()
    alice = _token_of(database_url, tenant, "alice", "submit", "approve")
    command = ["submit", ONE, '{"kind": "export"}', "--key", uuid.uuid4().hex]
    done = _cli_as(providers, *command, token=alice)
    assert done.returncode == 0, done.stderr
    op = uuid.UUID(json.loads(done.stdout)["operation_id"])
    row = load(database_url, op)
    assert (row.tenant, row.requested_by) == (tenant, "alice")
    fp = ["--fingerprint", row.request_fingerprint]
    own = _cli_as(providers, "approve", str(op), *fp, token=alice)
    assert own.returncode == 2 and "self_approval_refused" in own.stderr
    intake = [
        ln for ln in _cli_as(providers, "history", str(op)).stdout.splitlines() if "intake" in ln
    ]
    assert "actor=token:alice" in intake[0]
    typed = _cli_as(providers, *command, "--requested-by", "zed", token=alice)
    assert typed.returncode == 2 and "--requested-by: a token or --break-glass" in typed.stderr
    foreign = _cli_as(providers, *command, "--tenant", tenant_name(), token=alice)
    assert foreign.returncode == 1 and "is not the token's tenant" in foreign.stderr


def test_a_break_glass_submission_is_marked_in_the_intake_log(
    database_url: str, providers: Path
) -> None:
    tenant = tenant_name()
    command = ["submit", ONE, '{"kind": "export"}', "--key", uuid.uuid4().hex]
    done = _cli_as(providers, *command, "--tenant", tenant, "--break-glass", "API is down")
    assert done.returncode == 0, done.stderr
    op = uuid.UUID(json.loads(done.stdout)["operation_id"])
    actor = f"break-glass:{getpass.getuser()}"
    row = load(database_url, op)
    assert row.requested_by == actor
    fp = ["--fingerprint", row.request_fingerprint]
    # The same operator breaking glass again is still the submitter.
    own = _cli_as(providers, "approve", str(op), *fp, "--break-glass", "approving my own")
    assert own.returncode == 2 and "self_approval_refused" in own.stderr
    carol = _token_of(database_url, tenant, "carol")
    approved = _cli_as(providers, "approve", str(op), *fp, token=carol)
    assert approved.stdout.strip() == "create_pending", approved.stderr
    history = _cli_as(providers, "history", str(op)).stdout
    print(history)  # the report shows a break-glass submission's history
    (intake,) = [ln for ln in history.splitlines() if " intake " in ln]
    assert f"actor={actor}" in intake
    (intent,) = [ln for ln in history.splitlines() if "intent recorded" in ln]
    assert "[BREAK-GLASS, not counted toward a two-person rule: API is down]" in intent
