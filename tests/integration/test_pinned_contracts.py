"""Contracts are pinned (issue 33 finding 7, DESIGN.md invariant 16), against the real
database, Redis and two in-process sandbox providers.

A contract edited while an operation runs must not change how that operation is read:
it is polled and collected under the contract text it was created under (kept in
``provider_contracts`` by digest), while a new operation uses the edited one. Moving a
running operation is a person's recorded decision; ``providers check`` reports which
running operations use which version.

Each test has its own provider (a contract named after it), so counts are its own.
The edit moves the provider to another base URL: read under the edited contract, the
running operation's status URL is on an origin the contract no longer allows.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select, text

from jobwarden.api.auth import create_token
from jobwarden.config.settings import Settings
from jobwarden.demo.harness import REPO
from jobwarden.demo.sandbox.server import SandboxServer
from jobwarden.models.contracts.pins import contract_digest, short_digest
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import ProviderContractRow
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import STEPS
from jobwarden.tasks import runtime as runtime_module
from jobwarden.tasks.humans.interventions import request_cancel
from jobwarden.tasks.intake import submit_operation
from jobwarden.tasks.runtime import Runtime, build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from jobwarden.tasks.steps import run
from tests.cli_runner import CliResult, run_cli
from tests.integration.api_helpers import insert_operation, load, tenant_name

SHIPPED = (REPO / "config" / "providers" / "sandbox.toml").read_text()
CANCEL_TABLE = (
    '[cancel]\nmethod = "POST"\npath = "/v1/jobs/{job_id}/cancel"\naccepted_statuses = [200, 202]\n'
)
MAX_STEPS = 12  # create, a few polls, collect: far more than a finished job needs
UNREACHABLE = "postgresql+psycopg://jobwarden@127.0.0.1:1/nowhere"


@pytest.fixture(scope="module")
def old_server() -> Iterator[SandboxServer]:
    with SandboxServer() as server:
        yield server


@pytest.fixture(scope="module")
def new_server() -> Iterator[SandboxServer]:
    with SandboxServer() as server:
        yield server


def _contract(name: str, base_url: str, max_status_requests: int = 200) -> str:
    """The shipped sandbox contract as provider ``name`` at ``base_url``, no credential."""
    out = SHIPPED.replace('name = "sandbox"', f'name = "{name}"')
    out = out.replace('base_url = "http://127.0.0.1:8765"', f'base_url = "{base_url}"')
    out = out.replace('base_url_env = "JOBWARDEN_SANDBOX_URL" # overrides base_url when set\n', "")
    out = out.replace('[auth]\nscheme = "bearer"\nsecret_env = "JOBWARDEN_SANDBOX_TOKEN"\n', "")
    out = out.replace("max_status_requests = 200", f"max_status_requests = {max_status_requests}")
    assert f'name = "{name}"' in out and base_url in out and "[auth]" not in out
    return out


class Provider:
    """One test's provider: its contract file, which the test edits, and runtimes built
    from the directory as it is (each one a worker process started at that moment)."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.name = name
        self.file = folder / f"{name}.toml"
        self.built: list[Runtime] = []

    def write(self, contract: str) -> str:
        self.file.write_text(contract, encoding="utf-8")
        return contract_digest(contract)

    def runtime(self) -> Runtime:
        built = build_runtime(Settings(providers_dir=self.folder))
        self.built.append(built)
        return built


@pytest.fixture
def provider(tmp_path: Path, database_url: str) -> Iterator[Provider]:
    made = Provider(tmp_path, f"pinned_{secrets.token_hex(4)}")
    yield made
    for built in made.built:
        close_runtime(built)
    runtime_module.reset()


def _submit(
    rt: Runtime, provider: str, key: str, tenant: str | None = None, **behaviour: object
) -> uuid.UUID:
    answer = submit_operation(
        runtime=rt,
        tenant=tenant or tenant_name(),
        requested_by="alice",
        provider=provider,
        idempotency_key=key,
        command={"report": key, "behaviour": behaviour or {"polls_to_finish": 1}},
    )
    assert answer.outcome.value == "created" and answer.operation_id is not None
    return uuid.UUID(answer.operation_id)


def _due_now(database_url: str, op_id: uuid.UUID) -> None:
    """The test's clock: the operation's timer (unbound by the chain) is due now."""
    with transaction(database_url) as session:
        session.execute(
            text("UPDATE operation_timers SET next_poll_at = now() WHERE operation_id = :id"),
            {"id": op_id},
        )
        session.execute(
            text("UPDATE operation_timers SET poll_not_before = NULL WHERE operation_id = :id"),
            {"id": op_id},
        )


def _drive(rt: Runtime, database_url: str, op_id: uuid.UUID, until: S) -> Operation:
    """Run ``op_id``'s steps on ``rt`` (one a turn, each due at once) until ``until`` or a
    state no step works; returns the last snapshot."""
    op = load(database_url, op_id)
    for _ in range(MAX_STEPS):
        step = next((s for s in STEPS if op.state in s.states), None)
        if op.state is until or step is None:
            return op
        _due_now(database_url, op_id)
        op, _ = run(rt, load(database_url, op_id), step)
    return op


def _events(database_url: str, op_id: uuid.UUID) -> list[tuple[str, str, dict[str, object]]]:
    with transaction(database_url) as session:
        events = store.events_for(session, op_id)
        assert store.verify(session, op_id) == []  # the chain binds the pinned digest too
    return [(e.draft.kind.value, e.draft.actor, dict(e.draft.excerpt or {})) for e in events]


def _cli(*args: str, folder: Path, token: str | None = None) -> CliResult:
    """The CLI as an operator runs it (in this process, tests/cli_runner.py); it acts as
    ``token``'s principal when one is given, else has no token at all."""
    return run_cli(*args, env={"JOBWARDEN_PROVIDERS_DIR": str(folder), "JOBWARDEN_TOKEN": token})


def test_a_running_operation_is_polled_and_collected_under_the_contract_it_was_created_under(
    provider: Provider, old_server: SandboxServer, new_server: SandboxServer, database_url: str
) -> None:
    old = provider.write(_contract(provider.name, old_server.url))
    first = provider.runtime()
    running = _submit(first, provider.name, "before-the-edit")
    accepted = _drive(first, database_url, running, until=S.accepted)
    assert accepted.state is S.accepted and accepted.remote_job_id is not None

    # The provider moved; the contract is edited and a worker starts afresh under it.
    new = provider.write(_contract(provider.name, new_server.url, max_status_requests=150))
    assert new != old
    restarted = provider.runtime()
    fresh = _submit(restarted, provider.name, "after-the-edit")

    done = _drive(restarted, database_url, running, until=S.succeeded)
    assert done.state is S.succeeded, (done.state, done.escalation_detail)
    # Every request of the running operation went to the provider its contract names.
    assert old_server.requests(job_id=accepted.remote_job_id)
    assert new_server.requests(job_id=accepted.remote_job_id) == []
    assert done.contract_digest == old and done.max_status_requests == 200

    created = _drive(restarted, database_url, fresh, until=S.succeeded)
    assert created.state is S.succeeded, (created.state, created.escalation_detail)
    assert created.contract_digest == new and created.max_status_requests == 150
    assert new_server.requests(job_id=created.remote_job_id)
    assert old_server.requests(job_id=created.remote_job_id) == []

    # Both texts are kept by digest, and each intent event names its own.
    with transaction(database_url) as session:
        kept = dict(
            session.execute(
                select(ProviderContractRow.digest, ProviderContractRow.text).where(
                    ProviderContractRow.provider == provider.name
                )
            ).all()
        )
    assert kept == {
        old: _contract(provider.name, old_server.url),
        new: _contract(provider.name, new_server.url, max_status_requests=150),
    }
    intent = [ex for kind, _, ex in _events(database_url, running) if kind == "intent_recorded"]
    assert intent[0]["contract_digest"] == old
    # The restarted worker parsed the old text once, from the table, and keeps it: from
    # then on a step finds either contract without a query (no database to ask here).
    offline = replace(
        restarted,
        settings=restarted.settings.model_copy(update={"database_url": UNREACHABLE}),
    )
    assert offline.context_for(done).base_url == old_server.url
    assert offline.context_for(created) is restarted.context(provider.name)


def test_a_running_operation_is_cancelled_under_its_contract_after_the_cancel_was_removed(
    provider: Provider, old_server: SandboxServer, database_url: str
) -> None:
    provider.write(_contract(provider.name, old_server.url))
    op_id = _submit(provider.runtime(), provider.name, "cancel-me", never_finish=True)
    rt = provider.runtime()
    observing = _drive(rt, database_url, op_id, until=S.observing)
    assert observing.state is S.observing
    # The edited contract has no [cancel]: new operations cannot be cancelled remotely.
    edited = _contract(provider.name, old_server.url).replace(CANCEL_TABLE, "")
    assert edited != _contract(provider.name, old_server.url)
    provider.write(edited)
    restarted = provider.runtime()
    assert restarted.contract(provider.name).cancel is None

    assert request_cancel(str(op_id), "alice", "not needed", runtime=restarted) == (
        S.cancel_requested.value
    )
    ended = _drive(restarted, database_url, op_id, until=S.cancelled)
    assert ended.state is S.cancelled, (ended.state, ended.escalation_detail)
    sent = old_server.requests(job_id=observing.remote_job_id)
    assert any(r["path"].endswith("/cancel") for r in sent), sent


def test_show_and_history_name_the_contract_digest(
    provider: Provider, old_server: SandboxServer, database_url: str
) -> None:
    digest = provider.write(_contract(provider.name, old_server.url))
    op = _submit(provider.runtime(), provider.name, "named")
    shown = _cli("show", str(op), folder=provider.folder)
    assert shown.returncode == 0, shown.stderr
    assert f"contract         {short_digest(digest)}" in shown.stdout
    told = _cli("history", str(op), folder=provider.folder)
    assert f"intent recorded, contract {short_digest(digest)}" in told.stdout


def test_an_operation_from_before_pinning_is_read_under_the_current_contract(
    provider: Provider, old_server: SandboxServer, database_url: str
) -> None:
    provider.write(_contract(provider.name, old_server.url))
    rt = provider.runtime()
    op_id = insert_operation(database_url, tenant_name(), S.observing, provider=provider.name)
    op = load(database_url, op_id)
    assert op.contract_digest is None
    assert rt.context_for(op) is rt.context(provider.name)


def test_moving_a_running_operation_is_a_recorded_decision_and_check_reports_the_versions(
    provider: Provider, old_server: SandboxServer, new_server: SandboxServer, database_url: str
) -> None:
    old = provider.write(_contract(provider.name, old_server.url))
    first = provider.runtime()
    tenant = tenant_name()
    staying = _submit(first, provider.name, "stays", tenant)
    moving = _submit(first, provider.name, "moves", tenant)
    bob = create_token(database_url, tenant=tenant, name="bob", scopes=["read", "decide"]).token
    new = provider.write(_contract(provider.name, new_server.url, max_status_requests=150))
    _submit(provider.runtime(), provider.name, "new")

    checked = _cli("providers", "check", folder=provider.folder)
    assert checked.returncode == 0, checked.stderr
    assert f"ok      {provider.name}  ({provider.file})  contract {short_digest(new)}" in (
        checked.stdout
    )
    assert (
        f"running {provider.name}  contract {short_digest(old)}  2 operations  "
        "(older version (jobwarden providers migrate moves them))" in checked.stdout
    )
    assert f"running {provider.name}  contract {short_digest(new)}  1 operation  (current)" in (
        checked.stdout
    )

    moved = _cli(
        "providers",
        "migrate",
        provider.name,
        "--to",
        "current",
        "--operation",
        str(moving),
        folder=provider.folder,
        token=bob,
    )
    assert moved.returncode == 0, moved.stderr
    assert f"moved   {moving}  contract {short_digest(old)} -> {short_digest(new)}" in moved.stdout
    assert load(database_url, moving).contract_digest == new
    assert load(database_url, staying).contract_digest == old
    decisions = [
        (actor, ex)
        for kind, actor, ex in _events(database_url, moving)
        if kind == EventKind.decision.value
    ]
    # The author is the token's principal (invariant 15), never a typed name.
    assert decisions == [
        (
            "human:token:bob",
            {"decision": "contract_moved", "from_contract_digest": old, "contract_digest": new},
        )
    ]

    again = _cli("providers", "check", folder=provider.folder)
    assert f"contract {short_digest(old)}  1 operation  (older" in again.stdout
    assert f"contract {short_digest(new)}  2 operations  (current)" in again.stdout


def test_migrate_refuses_an_unknown_target_and_an_operation_already_current(
    provider: Provider, old_server: SandboxServer, database_url: str
) -> None:
    provider.write(_contract(provider.name, old_server.url))
    op = _submit(provider.runtime(), provider.name, "current")
    wrong = _cli(
        "providers", "migrate", provider.name, "--to", "v1", "--break-glass", "test",
        folder=provider.folder,
    )  # fmt: skip
    assert wrong.returncode == 2 and "--to: only 'current' is supported" in wrong.stderr
    current = _cli(
        "providers", "migrate", provider.name, "--to", "current", "--break-glass", "test",
        "--operation", str(op), folder=provider.folder,
    )  # fmt: skip
    assert current.returncode == 2, current.stdout
    assert "operation:" in current.stderr and "Traceback" not in current.stderr


def test_migrate_is_decided_by_a_token_for_its_own_tenant_or_by_break_glass_never_a_typed_name(
    provider: Provider, old_server: SandboxServer, new_server: SandboxServer, database_url: str
) -> None:
    """Issue 33 / invariant 15: moving a running operation is a decision with an
    authenticated author. A typed --approver is refused; a token moves only its tenant's
    operations; break-glass moves every tenant's and says so in each event it writes."""
    provider.write(_contract(provider.name, old_server.url))
    first = provider.runtime()
    mine, theirs = tenant_name(), tenant_name()
    ours = _submit(first, provider.name, "ours", mine)
    other = _submit(first, provider.name, "other", theirs)
    new = provider.write(_contract(provider.name, new_server.url, max_status_requests=150))
    typed = _cli(
        "providers", "migrate", provider.name, "--to", "current", "--approver", "bob",
        folder=provider.folder,
    )  # fmt: skip
    assert typed.returncode == 2 and "a typed name is not an identity" in typed.stderr
    assert load(database_url, ours).contract_digest != new
    carol = create_token(database_url, tenant=mine, name="carol", scopes=["decide"]).token
    by_token = _cli(
        "providers", "migrate", provider.name, "--to", "current",
        folder=provider.folder, token=carol,
    )  # fmt: skip
    assert by_token.returncode == 0, by_token.stderr
    assert load(database_url, ours).contract_digest == new
    assert load(database_url, other).contract_digest != new  # another tenant's: untouched
    glass = _cli(
        "providers", "migrate", provider.name, "--to", "current",
        "--break-glass", "API down, contract fix", folder=provider.folder,
    )  # fmt: skip
    assert glass.returncode == 0, glass.stderr
    assert "WARNING: break-glass" in glass.stderr
    assert load(database_url, other).contract_digest == new
    decision = next(
        (actor, ex) for kind, actor, ex in _events(database_url, other) if kind == "decision"
    )
    assert decision[0].startswith("human:break-glass:")
    assert decision[1]["break_glass"] == "API down, contract fix"
