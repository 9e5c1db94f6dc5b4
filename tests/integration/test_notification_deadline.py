"""A slow receiver delays only its own notifications (issue 33, finding 8).

A receiver that drips its answer one byte every 2 s never trips a per-read timeout; each
delivery is bounded as a whole (the provider edge's deadline transport), recorded as a
failed attempt, and a tenant's deliveries hold one seat at a time (a Redis lock), so
another tenant's notification is delivered meanwhile. Real Postgres, real Redis, real
receivers on free ports.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from redis import Redis

from jobwarden.models.humans.notification_targets import Targets, TenantTargets
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.humans.notifications import Relay, deliver_for, make_client, relay_once
from tests.integration.notify_helpers import (
    Receiver,
    escalate_on_a_step_connection,
    insert_operation,
    new_secret,
    outbox_rows,
    receiving,
)

DRIP_SECONDS = 2.0
ANSWER = b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
# The whole answer, dripped: what a per-read timeout would let the receiver hold us for.
DRIP_TOTAL = DRIP_SECONDS * len(ANSWER)
TIMEOUT = 3.0


@contextlib.contextmanager
def dripping() -> Iterator[Receiver]:
    """Reads the request, then sends its answer one byte every ``DRIP_SECONDS``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    receiver = Receiver(url=f"http://127.0.0.1:{listener.getsockname()[1]}/hook")
    done = threading.Event()

    def drip(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.recv(65536)
            receiver.arrived.set()
            for byte in ANSWER:
                conn.sendall(bytes([byte]))
                if done.wait(DRIP_SECONDS):  # the drip's pace, ended early by the test's end
                    return

    def accept() -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = listener.accept()
                threading.Thread(target=drip, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        done.set()
        thread.join(timeout=5)
        listener.close()


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"JW_TEST_SECRET_{secrets.token_hex(3).upper()}"
    monkeypatch.setenv(name, new_secret())
    return name


def _relay(url: str, targets: dict[str, str], secret_env: str) -> Relay:
    return Relay(
        database_url=url,
        targets=Targets(
            tenants={
                t: TenantTargets(tenant=t, url=where, secret_env=secret_env)
                for t, where in targets.items()
            }
        ),
        client=make_client(TIMEOUT),
        batch=10,
        timeout=TIMEOUT,
        jitter=lambda: 1.0,
    )


def _escalated(url: str, tenant: str, at: datetime) -> uuid.UUID:
    op = insert_operation(url, tenant, S.observing, at)
    escalate_on_a_step_connection(url, op, at)
    return op


def _webhook_row(url: str, op: uuid.UUID) -> dict[str, object]:
    (row,) = [r for r in outbox_rows(url, op) if r["channel"] == "webhook"]
    return row


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def test_a_receiver_dripping_its_answer_is_cut_at_the_whole_request_deadline(
    database_url: str, secret_env: str
) -> None:
    tenant, at = f"drip-{secrets.token_hex(4)}", _now()
    op = _escalated(database_url, tenant, at)
    with dripping() as receiver:
        relay = _relay(database_url, {tenant: receiver.url}, secret_env)
        started = time.monotonic()
        # This tenant's rows only: the process's database holds other tests' pending
        # notifications, older than this one, which an unfiltered claim would take first.
        report = relay_once(relay, now=at, tenant=tenant)
        elapsed = time.monotonic() - started
    assert receiver.arrived.is_set()
    # Generous: the deadline is 3 s; the drip would have held the send for ~130 s.
    assert elapsed < DRIP_TOTAL / 4, elapsed
    assert report.retrying == 1 and report.delivered == 0
    row = _webhook_row(database_url, op)
    assert (row["status"], row["attempts"], row["last_error"]) == ("pending", 1, "ReadTimeout")


def test_a_tenants_slow_receiver_never_delays_another_tenants_notification(
    database_url: str, secret_env: str
) -> None:
    slow, fast, at = f"slow-{secrets.token_hex(4)}", f"fast-{secrets.token_hex(4)}", _now()
    prefix = f"jwtest-notify-{secrets.token_hex(4)}"
    slow_ops = [_escalated(database_url, slow, at) for _ in range(3)]
    fast_op = _escalated(database_url, fast, at)
    redis = Redis.from_url(os.environ["JOBWARDEN_REDIS_URL"])  # the run's (tests/conftest.py)
    with dripping() as dripper, receiving() as receiver:
        relay = _relay(database_url, {slow: dripper.url, fast: receiver.url + "/hook"}, secret_env)
        slow_delivery = threading.Thread(target=deliver_for, args=(relay, redis, prefix, slow, at))
        slow_delivery.start()
        assert dripper.arrived.wait(timeout=10), "the slow tenant's delivery never started"
        # The slow tenant holds its one seat: a second delivery for it does not start...
        assert deliver_for(relay, redis, prefix, slow, at) is False
        # ...and the other tenant's is delivered while the slow one still drips.
        assert deliver_for(relay, redis, prefix, fast, at) is True
        still_dripping = slow_delivery.is_alive()
        slow_delivery.join(timeout=3 * TIMEOUT + 30)
    assert still_dripping and not slow_delivery.is_alive()
    assert _webhook_row(database_url, fast_op)["status"] == "delivered"
    assert len(receiver.requests) == 1
    for op in slow_ops:
        assert _webhook_row(database_url, op)["last_error"] == "ReadTimeout"
    redis.close()
