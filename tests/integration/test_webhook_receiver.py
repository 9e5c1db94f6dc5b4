"""The webhook receiver against real Postgres and Redis (no workers, no HTTP).

Deliveries are signed by the sandbox's own sender (jobwarden.demo.sandbox.webhooks), so
the receiver and the sender agree on the wire format the contracts describe.
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from jobwarden.api.app import create_app
from jobwarden.api.webhooks import MAX_WEBHOOK_BYTES
from jobwarden.config.settings import Settings
from jobwarden.demo.harness import REPO
from jobwarden.demo.sandbox.webhooks import signed_delivery
from jobwarden.models.history.chain import EventKind
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import OperationRow, TimerRow
from jobwarden.models.persistence.webhook_tables import WebhookDeliveryRow
from jobwarden.models.provider.webhooks import WebhookOutcome
from jobwarden.models.states import OperationState as S
from jobwarden.tasks import runtime as runtime_module
from jobwarden.tasks.humans.interventions import request_cancel
from jobwarden.tasks.leases import operation_lease
from jobwarden.tasks.provider.webhooks import WebhookBusyError, receive, refused_count
from jobwarden.tasks.runtime import Runtime, build_runtime, utcnow
from jobwarden.tasks.runtime import close as close_runtime
from tests.api_server import serving
from tests.integration.factories import insert_in

SECRET_ENV = "JOBWARDEN_SANDBOX_WEBHOOK_SECRET"
HMAC_SECRET = "integration-hmac-secret"
STANDARD_SECRET = "whsec_" + "c2VjcmV0LWZvci10aGUtc3RhbmRhcmQtc2NoZW1lLTMy"

WEBHOOK_TABLES = {
    "sandbox_hooks": (
        '[webhook]\nscheme = "hmac"\nsignature_header = "X-Sandbox-Signature"\n'
        'timestamp_header = "X-Sandbox-Timestamp"\nevent_id_pointer = "/id"\n'
        'job_id_pointer = "/job/id"\nsecret_env = "JOBWARDEN_HOOKS_HMAC_SECRET"\n'
        "tolerance_seconds = 300\n"
    ),
    "sandbox_standard": (
        '[webhook]\nscheme = "standard"\njob_id_pointer = "/job/id"\n'
        f'secret_env = "{SECRET_ENV}"\ntolerance_seconds = 300\n'
    ),
}


@pytest.fixture(scope="module")
def providers(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("webhook_providers")
    base = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    for name, table in WEBHOOK_TABLES.items():
        text = base.replace('name = "sandbox"', f'name = "{name}"')
        (folder / f"{name}.toml").write_text(text.replace("[poll]", table + "\n[poll]", 1))
    os.environ["JOBWARDEN_HOOKS_HMAC_SECRET"] = HMAC_SECRET
    os.environ[SECRET_ENV] = STANDARD_SECRET
    return Path(folder)


@pytest.fixture(scope="module")
def rt(providers: Path) -> Iterator[Runtime]:
    built = build_runtime(Settings(providers_dir=providers))
    yield built
    close_runtime(built)
    runtime_module.reset()


@pytest.fixture(scope="module")
def api(providers: Path) -> Iterator[str]:
    with serving(create_app(Settings(providers_dir=providers))) as url:
        yield url


def _operation(
    database_url: str, provider: str, state: S = S.observing, **overrides: Any
) -> tuple[uuid.UUID, str]:
    op_id = uuid.uuid4()
    job_id = f"job_{op_id.hex[:12]}"
    now = utcnow()
    values: dict[str, Any] = dict(
        operation_id=op_id,
        tenant="t1",
        provider=provider,
        request_fingerprint="f" * 64,
        route="/r",
        command={"a": 1},
        remote_job_id=job_id,
        status_url=f"http://127.0.0.1:8765/v1/jobs/{job_id}",
        trace_id="a" * 32,
        requested_by="tester",
        actor="tester",
        accepted_at=now,
        create_deadline=now + timedelta(minutes=5),
        result_deadline=now + timedelta(hours=1),
        max_status_requests=10,
        max_transport_failures=3,
        next_poll_at=now + timedelta(minutes=10),
        dispatched_at=None,
        create_attempts=1,
        status_requests_used=1,
        poll_attempt=1,
    )
    values.update(overrides)
    insert_in(database_url, state, at=now, **values)
    return op_id, job_id


def _deliveries(database_url: str, provider: str, event_id: str) -> int:
    with transaction(database_url) as session:
        found = session.scalar(
            select(func.count())
            .select_from(WebhookDeliveryRow)
            .where(WebhookDeliveryRow.provider == provider)
            .where(WebhookDeliveryRow.event_id == event_id)
        )
    return int(found or 0)


def _events(database_url: str, op_id: uuid.UUID) -> list[str]:
    with transaction(database_url) as session:
        return [e.draft.kind.value for e in store.events_for(session, op_id)]


@pytest.mark.parametrize(
    ("provider", "scheme", "secret"),
    [("sandbox_hooks", "hmac", HMAC_SECRET), ("sandbox_standard", "standard", STANDARD_SECRET)],
    ids=["hmac", "standard webhooks"],
)
def test_a_verified_delivery_wakes_a_parked_poll_and_a_repeat_records_nothing_twice(
    rt: Runtime, database_url: str, provider: str, scheme: str, secret: str
) -> None:
    op_id, job_id = _operation(database_url, provider)
    event_id = f"evt_{secrets.token_hex(6)}"
    headers, body = signed_delivery(scheme, secret, event_id, job_id, "succeeded")
    first = receive(rt, provider, headers, body)
    assert (first.status, first.outcome) == (200, WebhookOutcome.woke_poll.value)
    with transaction(database_url) as session:
        row = store.load(session, op_id)
    assert row is not None and row.state is S.observing  # never a state change by itself
    assert row.next_poll_at is not None and row.next_poll_at <= utcnow()
    again = receive(rt, provider, *signed_delivery(scheme, secret, event_id, job_id, "succeeded"))
    assert (again.status, again.outcome) == (200, "duplicate")
    assert _deliveries(database_url, provider, event_id) == 1
    assert _events(database_url, op_id).count(EventKind.webhook_received.value) == 1
    with transaction(database_url) as session:
        assert store.verify(session, op_id) == []


def test_a_delivery_inside_a_retry_after_window_moves_the_poll_to_its_end_not_sooner(
    rt: Runtime, database_url: str
) -> None:
    not_before = utcnow() + timedelta(seconds=40)
    op_id, job_id = _operation(database_url, "sandbox_hooks", poll_not_before=not_before)
    receipt = receive(
        rt,
        "sandbox_hooks",
        *signed_delivery("hmac", HMAC_SECRET, "evt_ra_" + job_id, job_id, "running"),
    )
    assert receipt.outcome == WebhookOutcome.woke_poll.value
    assert receipt.wake_at == not_before
    with transaction(database_url) as session:
        row = store.load(session, op_id)
        events = store.events_for(session, op_id)
    assert row is not None and row.next_poll_at == not_before
    assert events[-1].draft.delay_source == "provider_retry_after"


def test_a_delivery_for_a_finished_operation_is_recorded_and_changes_nothing_else(
    rt: Runtime, database_url: str
) -> None:
    op_id, job_id = _operation(database_url, "sandbox_hooks", S.succeeded, next_poll_at=None)
    with transaction(database_url) as session:
        before = store.load(session, op_id)
    receipt = receive(
        rt,
        "sandbox_hooks",
        *signed_delivery("hmac", HMAC_SECRET, "evt_late_" + job_id, job_id, "running"),
    )
    assert (receipt.status, receipt.outcome) == (200, WebhookOutcome.finished.value)
    with transaction(database_url) as session:
        after = store.load(session, op_id)
    assert before is not None and after is not None
    bookkeeping = {"version", "event_count", "last_event_hash", "updated_at", "last_event_kind"}
    changed = {
        name
        for name in before.__dataclass_fields__
        if getattr(before, name) != getattr(after, name)
    }
    assert changed <= bookkeeping and after.state is S.succeeded


def test_a_delivery_for_an_unknown_job_is_acknowledged_and_its_row_kept(
    rt: Runtime, database_url: str
) -> None:
    event_id = f"evt_{secrets.token_hex(6)}"
    headers, body = signed_delivery("hmac", HMAC_SECRET, event_id, "job_nobody_has", "running")
    receipt = receive(rt, "sandbox_hooks", headers, body)
    assert (receipt.status, receipt.outcome) == (202, WebhookOutcome.unknown_job.value)
    assert _deliveries(database_url, "sandbox_hooks", event_id) == 1


@pytest.mark.parametrize(
    ("variant", "status", "reason"),
    [("forged", 401, "forged"), ("stale", 400, "stale")],
)
def test_forged_and_stale_deliveries_record_nothing_but_a_counter(
    rt: Runtime, database_url: str, variant: str, status: int, reason: str
) -> None:
    op_id, job_id = _operation(database_url, "sandbox_standard")
    event_id = f"evt_{secrets.token_hex(6)}"
    counted = refused_count(rt.redis, rt.settings.key_prefix, "sandbox_standard", reason)
    headers, body = signed_delivery(
        "standard", STANDARD_SECRET, event_id, job_id, "succeeded", variant=variant
    )
    receipt = receive(rt, "sandbox_standard", headers, body)
    assert (receipt.status, receipt.outcome) == (status, "refused")
    assert _deliveries(database_url, "sandbox_standard", event_id) == 0
    assert EventKind.webhook_received.value not in _events(database_url, op_id)
    after = refused_count(rt.redis, rt.settings.key_prefix, "sandbox_standard", reason)
    assert after == counted + 1


def test_a_delivery_waiting_on_a_busy_operation_is_refused_for_now_and_records_nothing(
    rt: Runtime, database_url: str
) -> None:
    op_id, job_id = _operation(database_url, "sandbox_hooks")
    impatient = replace(rt, settings=rt.settings.model_copy(update={"lease_ttl_seconds": 0.3}))
    event_id = f"evt_{secrets.token_hex(6)}"
    headers, body = signed_delivery("hmac", HMAC_SECRET, event_id, job_id, "succeeded")
    with (
        operation_lease(rt.redis, rt.settings.key_prefix, op_id, 30),
        pytest.raises(WebhookBusyError),
    ):
        receive(impatient, "sandbox_hooks", headers, body)
    # Nothing committed, so the sender's retry is not mistaken for a duplicate.
    assert _deliveries(database_url, "sandbox_hooks", event_id) == 0
    assert receive(rt, "sandbox_hooks", headers, body).outcome == WebhookOutcome.woke_poll.value


# --- over HTTP ----------------------------------------------------------------------------


def test_a_forged_delivery_over_http_is_a_401_problem_with_a_challenge(api: str) -> None:
    headers, body = signed_delivery(
        "hmac", HMAC_SECRET, "evt_f", "job_f", "running", variant="forged"
    )
    answer = httpx.post(f"{api}/v1/webhooks/sandbox_hooks", content=body, headers=headers)
    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["type"].endswith("/webhook_forged")
    assert answer.headers["www-authenticate"].startswith("Webhook-Signature")
    assert HMAC_SECRET not in answer.text


def test_an_unreadable_delivery_over_http_is_a_400_problem(api: str) -> None:
    headers, _ = signed_delivery("standard", STANDARD_SECRET, "evt_m", "job_m", "running")
    del headers["webhook-id"]
    answer = httpx.post(f"{api}/v1/webhooks/sandbox_standard", content=b"{}", headers=headers)
    assert answer.status_code == 400
    assert answer.json()["type"].endswith("/webhook_malformed")


def test_a_body_over_the_webhook_cap_is_refused_before_it_is_read_whole_and_counted(
    api: str, rt: Runtime
) -> None:
    counted = refused_count(rt.redis, rt.settings.key_prefix, "sandbox_hooks", "too_large")
    big = b"{" + b" " * MAX_WEBHOOK_BYTES + b"}"
    answer = httpx.post(f"{api}/v1/webhooks/sandbox_hooks", content=big)
    assert answer.status_code == 413
    after = refused_count(rt.redis, rt.settings.key_prefix, "sandbox_hooks", "too_large")
    assert after == counted + 1


def test_a_provider_without_a_receiver_is_a_404_and_leaves_no_counter(
    api: str, rt: Runtime
) -> None:
    big = b"{" + b" " * MAX_WEBHOOK_BYTES + b"}"
    answer = httpx.post(f"{api}/v1/webhooks/nobody", content=big)
    assert answer.status_code == 404
    assert answer.json()["type"].endswith("/not_found")
    # Any path could otherwise mint Redis keys: counters are per configured provider only.
    assert not rt.redis.keys(f"{rt.settings.key_prefix}:webhooks:refused:nobody:*")


def test_a_missing_webhook_secret_is_a_503_that_names_no_secret(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SECRET_ENV)
    headers, body = signed_delivery("standard", STANDARD_SECRET, "evt_s", "job_s", "running")
    answer = httpx.post(f"{api}/v1/webhooks/sandbox_standard", content=body, headers=headers)
    assert answer.status_code == 503
    assert answer.json()["type"].endswith("/webhook_unavailable")
    assert answer.headers["retry-after"] == "60"


def test_the_webhook_table_its_index_and_migration_0009_are_in_step(database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import create_engine

    from jobwarden.models.persistence.tables import Base

    engine = create_engine(database_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    ours = [
        entry
        for entry in diff
        if "webhook_deliveries" in repr(entry) or "ix_operations_provider_remote_job" in repr(entry)
    ]
    assert ours == []


# --- the reservation rule for writers outside a step (tasks/steps.py under_lease) --------


def test_a_delivery_that_only_records_keeps_the_reserved_status_request(
    rt: Runtime, database_url: str
) -> None:
    # The poll is already due and holds a reserved, counted request: the delivery changes
    # neither the state nor the timer, so the reservation its poll will spend stays.
    op_id, job_id = _operation(
        database_url,
        "sandbox_hooks",
        next_poll_at=utcnow() - timedelta(seconds=1),
        status_requests_used=2,
        reserved_request=2,
    )
    receipt = receive(
        rt,
        "sandbox_hooks",
        *signed_delivery("hmac", HMAC_SECRET, "evt_due_" + job_id, job_id, "running"),
    )
    assert receipt.outcome == WebhookOutcome.poll_already_due.value
    with transaction(database_url) as session:
        row = store.load(session, op_id)
    assert row is not None
    assert (row.reserved_request, row.status_requests_used) == (2, 2)


def test_a_cancel_request_under_the_lease_returns_the_unsent_reservation(
    rt: Runtime, database_url: str
) -> None:
    # The cancel takes the operation out of polling: the request reserved for its next
    # poll will never leave, so x of N goes back to counting sends only.
    op_id, _ = _operation(database_url, "sandbox_hooks", status_requests_used=2, reserved_request=2)
    assert request_cancel(str(op_id), "ann", "not needed", runtime=rt) == "cancel_requested"
    with transaction(database_url) as session:
        row = store.load(session, op_id)
        events = store.events_for(session, op_id)
    assert row is not None
    assert (row.reserved_request, row.status_requests_used) == (None, 1)
    assert (events[-1].draft.kind, events[-1].draft.actor) == (
        EventKind.cancel_requested,
        "human:ann",
    )
    with transaction(database_url) as session:
        assert store.verify(session, op_id) == []


# --- a burst of signed deliveries (issue 24: 30 webhooks in 10 s made 30 status reads) ---


def test_a_burst_of_deliveries_wakes_one_status_read_per_interval_not_one_each(
    rt: Runtime, database_url: str
) -> None:
    # Each delivery is followed by "the poll" whenever it is due: it reads, then parks
    # the timer far ahead as a pending answer's backoff does. Without the interval every
    # delivery would wake one more read; with it, the burst wakes one now and one later.
    op_id, job_id = _operation(database_url, "sandbox_hooks")
    started = utcnow()
    reads = 0
    held: list[object] = []
    for n in range(30):
        event = f"evt_burst_{n}_{job_id}"
        receipt = receive(
            rt, "sandbox_hooks", *signed_delivery("hmac", HMAC_SECRET, event, job_id, "running")
        )
        assert receipt.status == 200
        if receipt.wake_at is not None and receipt.wake_at > utcnow():
            held.append(receipt.wake_at)
        with transaction(database_url) as session:
            row = session.get(OperationRow, op_id)
            timer = session.get(TimerRow, op_id)  # the timer lives apart (0021)
            assert row is not None and timer is not None
            if timer.next_poll_at is not None and timer.next_poll_at <= utcnow():
                reads += 1
                timer.next_poll_at = utcnow() + timedelta(minutes=10)
                timer.version += 1
    interval = timedelta(seconds=10)  # the [webhook] default
    assert utcnow() - started < interval, "the burst must fit one interval for this count"
    assert reads == 1
    assert held and all(at == held[0] for at in held)
    assert started + interval <= held[0] <= utcnow() + interval  # type: ignore[operator]
    with transaction(database_url) as session:
        events = store.events_for(session, op_id)
        assert store.verify(session, op_id) == []
    sources = {e.draft.delay_source for e in events if e.draft.kind is EventKind.webhook_received}
    assert "webhook_interval" in sources
