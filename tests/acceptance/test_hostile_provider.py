"""A provider that misbehaves: deep JSON, numbers past 64 bits, slow drips, huge bodies,
foreign Location / Operation-Location / result hosts, control characters in job ids and
result references, an echoed credential, an absurd Retry-After (issue 7).

Each test drives one operation through real workers against the sandbox in one hostile
mode and asserts on the sandbox's request log: no request to a foreign origin (the
credential never leaves), never more creates than max_create_attempts, no budget spent
without requests, and the operation stopping with a clear reason (never stuck, never
looping).

The module runs its own world (database, sandbox, workers, queue): its contracts include
Location and Operation-Location variants the shared stack does not load, and its slow and
huge answers stay away from the other tests' workers. A second sandbox on another
loopback address stands for the foreign origin; its request log must stay empty.
"""

from __future__ import annotations

import os
import re
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from jobwarden.demo.harness import REPO, Stack, wait_for
from jobwarden.demo.sandbox.server import SandboxServer
from tests.acceptance.conftest import Pipeline, logged, worker_logs
from tests.conftest import ADMIN_URL, TEST_DB

TOKEN = secrets.token_hex(12)
REQUEST_TIMEOUT = 2.0  # seconds, the contracts' request_timeout_seconds
MAX_CREATE_ATTEMPTS = 3
MAX_TRANSPORT_FAILURES = 3
# Environment the module's world overrides in this process (submit_operation reads it).
_SWAPPED = (
    "JOBWARDEN_DATABASE_URL",
    "JOBWARDEN_QUEUE",
    "JOBWARDEN_PROVIDERS_DIR",
    "JOBWARDEN_SANDBOX_URL",
    "JOBWARDEN_SANDBOX_TOKEN",
)


def _set(text_: str, key: str, value: str) -> str:
    replaced, count = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text_)
    assert count == 1, key
    return replaced


def _contracts(directory: Path) -> None:
    base = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    for key, value in {
        "request_timeout_seconds": f"{REQUEST_TIMEOUT:g}",
        "initial_delay_seconds": "0.1",
        "base_seconds": "0.1",
        "max_seconds": "0.5",
        "rate_limit_base_seconds": "0.3",
        # Small budgets keep a test that spends them (2 s per dripped request) short.
        "max_transport_failures": str(MAX_TRANSPORT_FAILURES),
        "max_create_attempts": str(MAX_CREATE_ATTEMPTS),
    }.items():
        base = _set(base, key, value)
    (directory / "sandbox.toml").write_text(base)
    for name, locator in (
        ("sandbox_location", "location"),
        ("sandbox_oplocation", "operation_location"),
    ):
        variant = base.replace('name = "sandbox"', f'name = "{name}"')
        variant = _set(variant, "job_locator", f'"{locator}"')
        # The status URL comes from the header: a status path would contradict it.
        variant, count = re.subn(r'(?m)^path = "/v1/jobs/\{job_id\}"\n', "", variant)
        assert count == 1
        (directory / f"{name}.toml").write_text(variant)


@dataclass
class World:
    sandbox: SandboxServer
    foreign: SandboxServer  # another origin: 127.0.0.2, same sandbox code
    stack: Stack
    database_url: str


@pytest.fixture(scope="module")
def world(worker_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import upgrade
    from jobwarden.tasks import runtime

    name = f"{TEST_DB}_hostile"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    database_url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    upgrade(database_url)
    providers = tmp_path_factory.mktemp("hostile-providers")
    _contracts(providers)
    saved = {key: os.environ.get(key) for key in _SWAPPED}
    sandbox = SandboxServer(token=TOKEN)
    foreign = SandboxServer(host="127.0.0.2", token=TOKEN)
    sandbox.start()
    foreign.start()
    env = {
        **worker_env,
        "JOBWARDEN_DATABASE_URL": database_url,
        "JOBWARDEN_QUEUE": f"{os.environ['JOBWARDEN_QUEUE']}-hostile",
        "JOBWARDEN_PROVIDERS_DIR": str(providers),
        "JOBWARDEN_SANDBOX_URL": sandbox.url,
        "JOBWARDEN_SANDBOX_TOKEN": TOKEN,
    }
    os.environ.update({key: env[key] for key in _SWAPPED})
    get_settings.cache_clear()
    runtime.reset()
    stack = Stack(env)
    try:
        stack.start_worker("hostile1")
        stack.start_worker("hostile2")
        stack.start_beat("hostile-beat")
        stack.wait_ready("hostile1")
        stack.wait_ready("hostile2")
        yield World(sandbox=sandbox, foreign=foreign, stack=stack, database_url=database_url)
    finally:
        stack.stop()
        sandbox.stop()
        foreign.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        get_settings.cache_clear()
        runtime.reset()
        dispose_all()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def hostile(world: World) -> Iterator[Pipeline]:
    p = Pipeline(world.sandbox, world.database_url)
    yield p
    p.verify_all()  # whatever the provider sent, the history stays verifiable
    assert world.foreign.requests() == [], "a request reached the foreign origin"


def _traced(pipeline: Pipeline, op: str, kind: str | None = None) -> list[dict[str, Any]]:
    """Every request the sandbox saw for the operation, found by its trace id (a job id
    that cannot be stored or routed would hide requests from job_requests())."""
    trace = pipeline.row(op).trace_id
    return [
        r
        for r in pipeline.sandbox.requests()
        if trace in (r["traceparent"] or "") and (kind is None or r["kind"] == kind)
    ]


def _stopped(pipeline: Pipeline, op: str, *, timeout: float = 20.0) -> Any:
    """The operation's final row, once automation stopped; then the bounds that always hold."""
    row = pipeline.wait_state(op, timeout=timeout)
    assert row.next_poll_at is None, "stopped, yet something is still due"
    assert len(_traced(pipeline, op, "create")) <= MAX_CREATE_ATTEMPTS
    # Every status request counted was sent, and every one sent was counted.
    assert row.status_requests_used == len(_traced(pipeline, op, "status"))
    return row


def _excerpts(pipeline: Pipeline, op: str) -> list[dict[str, Any]]:
    return [dict(e.draft.excerpt or {}) for e in pipeline.events(op)]


def _stored_text(database_url: str, op: str) -> str:
    """The operation's row and every event row as Postgres holds them, as text."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT row_to_json(o)::text FROM operations o WHERE operation_id = :id "
                    "UNION ALL SELECT row_to_json(e)::text FROM operation_events e "
                    "WHERE operation_id = :id"
                ),
                {"id": uuid.UUID(op)},
            ).scalars()
            return "\n".join(rows)
    finally:
        engine.dispose()


# -- foreign origins: the credential goes only where the contract says -------------------


def test_a_location_on_the_providers_own_origin_is_followed_to_the_end(
    world: World, hostile: Pipeline
) -> None:
    # The control for the next two tests: the Location contract works when Location is honest.
    op = hostile.submit({"polls_to_finish": 1}, provider="sandbox_location")
    row = _stopped(hostile, op)
    assert row.state == "succeeded"
    assert row.status_url is not None and row.status_url.startswith(world.sandbox.url)


@pytest.mark.parametrize(
    ("provider", "mode"),
    [
        ("sandbox_location", "foreign_location"),
        ("sandbox_oplocation", "foreign_operation_location"),
    ],
)
def test_a_status_url_on_a_foreign_origin_stops_the_operation_and_is_never_requested(
    world: World, hostile: Pipeline, provider: str, mode: str
) -> None:
    op = hostile.submit(
        {"hostile_create": mode, "foreign_origin": world.foreign.url}, provider=provider
    )
    row = _stopped(hostile, op)
    assert (row.state, row.escalation_reason) == ("escalated", "contract_violation")
    assert world.foreign.url.split("//")[1] in (row.escalation_detail or "")
    assert _traced(hostile, op, "status") == []
    assert len(_traced(hostile, op, "create")) == 1


def test_a_result_reference_on_a_foreign_host_stops_the_operation_and_is_never_fetched(
    world: World, hostile: Pipeline
) -> None:
    op = hostile.submit(
        {
            "hostile_result": "foreign_host",
            "foreign_origin": world.foreign.url,
            "polls_to_finish": 1,
        }
    )
    row = _stopped(hostile, op)
    assert (row.state, row.escalation_reason) == ("escalated", "contract_violation")
    assert _traced(hostile, op, "result") == []
    assert hostile.stored_results(op) == []


# -- odd strings: job ids and result references that cannot form a safe URL -------------


@pytest.mark.parametrize("style", ["newline", "tab", "dot_segments", "long"])
def test_a_job_id_that_cannot_be_one_url_path_segment_is_a_contract_violation(
    hostile: Pipeline, style: str
) -> None:
    op = hostile.submit({"job_id_style": style})
    row = _stopped(hostile, op)
    assert (row.state, row.escalation_reason) == ("escalated", "contract_violation")
    # Refused at the create answer: one create, no status read on a mangled path.
    assert len(_traced(hostile, op, "create")) == 1
    assert _traced(hostile, op) == _traced(hostile, op, "create")
    assert row.remote_job_id is None or row.remote_job_id.isprintable()


@pytest.mark.parametrize("mode", ["newline_reference", "tab_reference"])
def test_a_result_reference_with_a_control_character_stops_the_operation_unfetched(
    hostile: Pipeline, mode: str
) -> None:
    # httpx refuses such a URL before sending (InvalidURL), which once crashed the step
    # and made the sweeper retry it without bound.
    op = hostile.submit({"hostile_result": mode, "polls_to_finish": 1})
    row = _stopped(hostile, op)
    assert (row.state, row.escalation_reason) == ("escalated", "contract_violation")
    assert _traced(hostile, op, "result") == []
    assert row.step_failures == 0


# -- bodies: deep, huge, slow ------------------------------------------------------------


def test_a_deep_json_status_spends_the_transport_budget_then_escalates(
    hostile: Pipeline,
) -> None:
    op = hostile.submit({"hostile_status": "deep_json", "never_finish": True})
    row = _stopped(hostile, op)
    assert (row.state, row.escalation_reason) == ("escalated", "provider_failure")
    statuses = _traced(hostile, op, "status")
    assert len(statuses) == MAX_TRANSPORT_FAILURES + 1
    assert row.transport_failures_used == MAX_TRANSPORT_FAILURES + 1
    problems = [e.get("body_problem") for e in _excerpts(hostile, op) if "body_problem" in e]
    assert problems == ["too_deep"] * len(statuses)
    assert row.step_failures == 0  # observations, not crashes


def test_a_huge_status_body_is_cut_at_the_answer_limit_and_counted(hostile: Pipeline) -> None:
    op = hostile.submit(
        {"hostile_status": "huge", "huge_bytes": 64 * 1024 * 1024, "never_finish": True}
    )
    row = _stopped(hostile, op)
    assert (row.state, row.escalation_reason) == ("escalated", "provider_failure")
    assert len(_traced(hostile, op, "status")) == MAX_TRANSPORT_FAILURES + 1
    problems = [e.get("body_problem") for e in _excerpts(hostile, op) if "body_problem" in e]
    assert set(problems) == {"too_large"}


def test_a_huge_result_fails_validation_on_its_size_after_one_download(
    hostile: Pipeline,
) -> None:
    # The sandbox contract allows 10 MiB; the provider sends 40 MB.
    op = hostile.submit({"hostile_result": "huge", "huge_bytes": 40_000_000, "polls_to_finish": 1})
    row = _stopped(hostile, op)
    assert row.state == "result_validation_failed"
    assert len(_traced(hostile, op, "result")) == 1
    rejected = [e for e in _excerpts(hostile, op) if e.get("problem")]
    assert any("exceeds 10485760 bytes" in str(e["problem"]) for e in rejected), rejected


def test_a_deep_json_result_stops_after_a_bounded_number_of_downloads(
    hostile: Pipeline,
) -> None:
    op = hostile.submit({"hostile_result": "deep_json", "polls_to_finish": 1})
    row = _stopped(hostile, op)
    # Refused by validation, or, while validation recurses into it, a crash counted three
    # times: either way a stop with a reason and a handful of downloads, never a loop.
    assert row.state == "result_validation_failed" or (
        (row.state, row.escalation_reason) == ("escalated", "internal_error")
    ), (row.state, row.escalation_reason, row.escalation_detail)
    assert 1 <= len(_traced(hostile, op, "result")) <= 3


def _all_ended(pipeline: Pipeline, op: str, kind: str) -> list[float] | None:
    """How long each exchange of ``kind`` lasted, once the sandbox saw every one end."""
    entries = _traced(pipeline, op, kind)
    if not entries or any(r["ended"] is None for r in entries):
        return None
    return [r["ended"] - r["monotonic"] for r in entries]


def test_a_dripping_status_answer_is_cut_at_the_request_timeout_and_the_lease_holds(
    world: World, hostile: Pipeline
) -> None:
    # One byte every 200 ms: each read succeeds, so only a whole-request deadline ends it.
    op = hostile.submit(
        {"hostile_status": "drip", "drip_interval_seconds": 0.2, "never_finish": True}
    )
    row = _stopped(hostile, op, timeout=30.0)
    assert (row.state, row.escalation_reason) == ("escalated", "provider_failure")
    statuses = _traced(hostile, op, "status")
    assert len(statuses) == MAX_TRANSPORT_FAILURES + 1
    # The client leaves at its deadline; the sandbox notices at its next byte.
    durations = wait_for(
        lambda: _all_ended(hostile, op, "status"), timeout=5.0, what="the drips to end"
    )
    assert durations is not None
    assert all(d < REQUEST_TIMEOUT + 1.0 for d in durations), durations
    assert row.step_failures == 0
    # No request outlived the lease: no second owner ever lost a fenced write.
    assert logged(world.stack, "fenced_write_refused", operation_id=op) == []


def test_a_dripping_create_answer_is_reconciled_with_the_same_token_and_bounded(
    world: World, hostile: Pipeline
) -> None:
    # Every create and same-token retry drips: each one ends ambiguous at the deadline.
    op = hostile.submit({"hostile_create": "drip", "drip_interval_seconds": 0.2})
    row = _stopped(hostile, op, timeout=30.0)
    assert row.state == "escalated", (row.state, row.escalation_detail)
    creates = _traced(hostile, op, "create")
    assert 1 <= len(creates) <= MAX_CREATE_ATTEMPTS
    assert {c["idempotency_key"] for c in creates} == {row.provider_token}
    assert len(hostile.remote_jobs(op)) == 1  # one remote job, however often asked
    durations = wait_for(
        lambda: _all_ended(hostile, op, "create"), timeout=5.0, what="the drips to end"
    )
    assert durations is not None
    assert all(d < REQUEST_TIMEOUT + 1.0 for d in durations), durations
    assert logged(world.stack, "fenced_write_refused", operation_id=op) == []


# -- numbers past 64 bits, an echoed credential, an absurd Retry-After -------------------


def _decimal(value: Any) -> Decimal:
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def test_numbers_past_64_bits_in_status_answers_are_stored_exactly_and_verify(
    hostile: Pipeline,
) -> None:
    op = hostile.submit({"hostile_status": "big_numbers", "polls_to_finish": 2})
    row = _stopped(hostile, op)
    assert row.state == "succeeded"
    bodies = [e["body"] for e in _excerpts(hostile, op) if isinstance(e.get("body"), dict)]
    big = [b for b in bodies if "bytes_processed" in b]
    assert big, bodies
    assert all(b["bytes_processed"] == 2**64 and b["records_seen"] == 2**70 for b in big)
    # JSONB hands 1e300 back as the integer 10**300: the same decimal value, exactly.
    assert all(_decimal(b["cost_estimate"]) == Decimal("1e300") for b in big)
    assert all(_decimal(b["tiny_fraction"]) == Decimal("1e-300") for b in big)
    # verify_all() in the fixture: the chain holding them checks out.


def test_numbers_past_64_bits_in_the_create_answer_are_stored_exactly_and_verify(
    hostile: Pipeline,
) -> None:
    op = hostile.submit({"hostile_create": "big_numbers", "polls_to_finish": 1})
    row = _stopped(hostile, op)
    assert row.state == "succeeded"
    assert len(_traced(hostile, op, "create")) == 1


def test_a_credential_echoed_by_the_provider_is_stored_nowhere(
    world: World, hostile: Pipeline
) -> None:
    op = hostile.submit({"hostile_status": "echo_credential", "polls_to_finish": 2})
    row = _stopped(hostile, op)
    assert row.state == "succeeded"
    statuses = _traced(hostile, op, "status")
    assert statuses and all(r["authorized"] for r in statuses)
    stored = _stored_text(world.database_url, op)
    assert "echo" in stored or "debug" in stored  # the echoing answers were recorded
    assert TOKEN not in stored
    assert TOKEN not in worker_logs(world.stack)


def test_an_absurd_retry_after_on_the_create_is_clipped_and_the_create_never_resent(
    hostile: Pipeline,
) -> None:
    # 10^12 seconds overflowed datetime arithmetic and made the create go out again.
    op = hostile.submit({"create_retry_after": 10**12, "never_finish": True})

    def parked() -> Any:
        row = hostile.row(op)
        return row if row.state in ("accepted", "observing") and row.next_poll_at else None

    row = wait_for(parked, timeout=15.0, what=f"{op} accepted and parked")
    assert row.next_poll_at <= row.result_deadline
    assert len(_traced(hostile, op, "create")) == 1
    assert _traced(hostile, op, "status") == []
    assert row.step_failures == 0
