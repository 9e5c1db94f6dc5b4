"""Notifications against the real Postgres and real HTTP receivers on free ports.

A stop's outbox rows commit with the stop's own write; the relay (moved by an injected
clock, never by sleeping) signs what it sends so the standardwebhooks library verifies
it, retries a receiver that is down until it is up and then delivers once, and never
makes a step wait. Each test has tenants of its own; the relay may also see other
tests' rows (it sends none of them: their tenants have no target here).
"""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from jobwarden.models.actions import Decided, Move
from jobwarden.models.errors import StaleVersionError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.notification_targets import Targets, TenantTargets
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import step_session
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.humans.notifications import Relay, make_client, relay_once, remind_once
from tests.integration.notify_helpers import (
    escalate_on_a_step_connection,
    free_port,
    hanging,
    insert_operation,
    new_secret,
    outbox_rows,
    receiving,
    write_on_a_step_connection,
)


def _tenant() -> str:
    return f"notify-{secrets.token_hex(4)}"


def _now() -> datetime:
    # Real time: the receiver's standardwebhooks checks the signed timestamp against it.
    return datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    name, value = f"JW_TEST_SECRET_{secrets.token_hex(3).upper()}", new_secret()
    monkeypatch.setenv(name, value)
    yield name, value


def _relay(url: str, targets: dict[str, TenantTargets], timeout: float = 5.0) -> Relay:
    return Relay(
        database_url=url,
        targets=Targets(tenants=targets),
        client=make_client(timeout),
        batch=1000,
        timeout=timeout,
        jitter=lambda: 1.0,
    )


def _webhook(tenant: str, url: str, secret_name: str) -> dict[str, TenantTargets]:
    return {tenant: TenantTargets(tenant=tenant, url=url, secret_env=secret_name)}


# -- written with the write that needs a human -------------------------------------------


def test_an_escalation_commits_its_outbox_rows_in_its_own_statement(database_url: str) -> None:
    at = _now()
    op_id = insert_operation(database_url, _tenant(), S.observing, at)
    stopped = escalate_on_a_step_connection(database_url, op_id, at)
    assert stopped.state is S.escalated
    rows = outbox_rows(database_url, op_id)
    assert sorted(str(r["channel"]) for r in rows) == ["apprise", "webhook"]
    (event_id,) = {r["event_id"] for r in rows}
    assert event_id == f"escalated:{op_id}:{stopped.event_count}"
    payload = rows[0]["payload"]
    assert isinstance(payload, dict)
    assert payload["data"]["reason"] == "rate_limited"
    assert payload["data"]["trace_id"] == stopped.trace_id
    assert all(r["status"] == "pending" and r["attempts"] == 0 for r in rows)


def test_a_stop_that_loses_its_fenced_race_leaves_no_outbox_row(database_url: str) -> None:
    at = _now()
    op_id = insert_operation(database_url, _tenant(), S.observing, at)
    with step_session(database_url) as session:
        stale = store.load(session, op_id)
    assert stale is not None
    escalate_on_a_step_connection(database_url, op_id, at)
    before = outbox_rows(database_url, op_id)
    with pytest.raises(StaleVersionError):
        from jobwarden.models.actions import EscalationReason, escalate

        stop = escalate(stale.state, EscalationReason.unknown_state, "late")
        write_on_a_step_connection(database_url, stale, Decided(action=stop), at)
    assert outbox_rows(database_url, op_id) == before


def test_a_poll_that_does_not_stop_automation_writes_no_notification(database_url: str) -> None:
    at = _now()
    op_id = insert_operation(database_url, _tenant(), S.accepted, at)
    with step_session(database_url) as session:
        op = store.load(session, op_id)
    assert op is not None
    move = Move(to=S.observing, event=EventKind.decision, cause="first poll", wake_at=at)
    written = write_on_a_step_connection(database_url, op, Decided(action=move), at)
    assert written.state is S.observing
    assert outbox_rows(database_url, op_id) == []


# -- delivery --------------------------------------------------------------------------------


def test_a_delivered_notification_verifies_with_the_standardwebhooks_library(
    database_url: str, secret_env: tuple[str, str]
) -> None:
    tenant, at = _tenant(), _now()
    op_id = insert_operation(database_url, tenant, S.observing, at)
    escalate_on_a_step_connection(database_url, op_id, at)
    with receiving() as receiver:
        relay_once(
            _relay(database_url, _webhook(tenant, receiver.url + "/hook", secret_env[0])), now=at
        )
    (got,) = receiver.requests
    assert got.path == "/hook"
    verified = Webhook(secret_env[1]).verify(got.body, got.headers)
    assert verified["type"] == "operation.escalated"
    assert verified["data"]["operation_id"] == str(op_id)
    rows = {r["channel"]: r for r in outbox_rows(database_url, op_id)}
    assert got.headers["webhook-id"] == rows["webhook"]["event_id"]
    assert rows["webhook"]["status"] == "delivered" and rows["webhook"]["attempts"] == 1
    # No Apprise target for this tenant: marked so, and never tried again.
    assert rows["apprise"]["status"] == "no_target"
    # A forged body fails the same check.
    with pytest.raises(Exception, match="signature"):
        Webhook(secret_env[1]).verify(got.body.replace(b"escalated", b"escalatex"), got.headers)


def test_a_receiver_down_for_30_seconds_gets_the_notification_afterwards_exactly_once(
    database_url: str, secret_env: tuple[str, str]
) -> None:
    tenant, t0 = _tenant(), _now()
    op_id = insert_operation(database_url, tenant, S.observing, t0)
    escalate_on_a_step_connection(database_url, op_id, t0)
    port = free_port()
    relay = _relay(database_url, _webhook(tenant, f"http://127.0.0.1:{port}/hook", secret_env[0]))
    now, refused = t0, 0
    for _ in range(10):  # attempts at t0, t0+5 s, t0+20 s while nothing listens on the port
        if now >= t0 + timedelta(seconds=30):
            break
        relay_once(relay, now=now)
        (row,) = [r for r in outbox_rows(database_url, op_id) if r["channel"] == "webhook"]
        assert row["status"] == "pending" and row["last_error"] == "ConnectError"
        refused += 1
        now = row["next_attempt_at"]  # type: ignore[assignment]
    assert refused == 3 and now == t0 + timedelta(seconds=65)
    with receiving(port) as receiver:
        relay_once(relay, now=now)
        relay_once(relay, now=now + timedelta(hours=1))  # nothing left to send
    (row,) = [r for r in outbox_rows(database_url, op_id) if r["channel"] == "webhook"]
    assert row["status"] == "delivered" and row["attempts"] == 4
    same = [r for r in receiver.requests if r.headers["webhook-id"] == row["event_id"]]
    assert len(same) == 1
    Webhook(secret_env[1]).verify(same[0].body, same[0].headers)


def test_a_step_escalates_while_the_receiver_hangs_and_its_notification_is_merely_pending(
    database_url: str, secret_env: tuple[str, str]
) -> None:
    tenant, at = _tenant(), _now()
    first = insert_operation(database_url, tenant, S.observing, at)
    second = insert_operation(database_url, tenant, S.observing, at)
    escalate_on_a_step_connection(database_url, first, at)
    with hanging() as receiver:
        relay = _relay(database_url, _webhook(tenant, receiver.url, secret_env[0]), timeout=10.0)
        sending = threading.Thread(target=relay_once, args=(relay,), kwargs={"now": at})
        sending.start()
        assert receiver.arrived.wait(timeout=10), "the relay never reached the receiver"
        # The relay is stuck on the receiver; a step's stop is written meanwhile and
        # returns while the relay still is (no clock: the relay's thread is the witness).
        stopped = escalate_on_a_step_connection(database_url, second, at)
        still_sending = sending.is_alive()
        sending.join(timeout=30)
    assert stopped.state is S.escalated and still_sending
    (pending,) = [r for r in outbox_rows(database_url, second) if r["channel"] == "webhook"]
    assert pending["status"] == "pending" and pending["attempts"] == 0
    (timed_out,) = [r for r in outbox_rows(database_url, first) if r["channel"] == "webhook"]
    assert timed_out["status"] == "pending" and timed_out["last_error"] == "ReadTimeout"


def test_an_approval_reminder_is_added_once_across_two_ticks(database_url: str) -> None:
    tenant, now = _tenant(), _now()
    ends = now + timedelta(minutes=30)
    soon = insert_operation(database_url, tenant, S.awaiting_approval, now, next_poll_at=ends)
    later = insert_operation(
        database_url, tenant, S.awaiting_approval, now, next_poll_at=now + timedelta(hours=5)
    )
    lead = timedelta(hours=1)
    remind_once(database_url, now=now, lead=lead)
    remind_once(database_url, now=now + timedelta(minutes=1), lead=lead)
    kind = "operation.approval_expiring"

    def reminders(op: uuid.UUID) -> list[dict[str, object]]:
        # Its intake announced it (operation.awaiting_approval); the reminders come after.
        rows = outbox_rows(database_url, op)
        assert {r["kind"] for r in rows} <= {"operation.awaiting_approval", kind}
        return [r for r in rows if r["kind"] == kind]

    rows = reminders(soon)
    assert len(rows) == 2  # one reminder, on each channel
    assert {r["event_id"] for r in rows} == {f"approval_expiring:{soon}:{int(ends.timestamp())}"}
    assert reminders(later) == []


def test_apprise_delivers_to_a_local_json_receiver(
    database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tenant, at = _tenant(), _now()
    op_id = insert_operation(database_url, tenant, S.observing, at)
    escalate_on_a_step_connection(database_url, op_id, at)
    with receiving(status=200) as receiver:
        port = receiver.url.rsplit(":", 1)[1]
        variable = f"JW_TEST_APPRISE_{secrets.token_hex(3).upper()}"
        monkeypatch.setenv(variable, f"json://127.0.0.1:{port}/chat")
        targets = {tenant: TenantTargets(tenant=tenant, apprise_urls_env=variable)}
        relay_once(_relay(database_url, targets), now=at)
    (got,) = receiver.requests
    assert got.path == "/chat"
    assert str(op_id) in got.body.decode()
    rows = {r["channel"]: r for r in outbox_rows(database_url, op_id)}
    assert rows["apprise"]["status"] == "delivered"
    assert rows["webhook"]["status"] == "no_target"
