"""A worker step's lease against the real Redis: it marks the announced reservation as it
is acquired, so the reserved status request leaves with no Redis call before the send
(issue 12), and it never lets a request that may have left be spent again (invariant 3).
It is the same lease as ``operation_lease`` (one mechanism, issue 19): each excludes the
other, an operation lease may wait for a step's to be let go, and a holder past its TTL
changes nothing as it lets go.

Keys live under a private prefix per test and are deleted afterwards.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import pytest
from redis import Redis

from jobwarden.demo.harness import wait_for
from jobwarden.models.actions import (
    Decided,
    DelaySource,
    EscalationReason,
    ProviderRequest,
    RequestPurpose,
    Send,
    Wait,
    escalate,
)
from jobwarden.models.effects import plan
from jobwarden.models.errors import LeaseNotAcquiredError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.plan import Plan
from jobwarden.models.provider.signals import RawResponse
from jobwarden.models.states import OperationState
from jobwarden.tasks import leases
from jobwarden.tasks.leases import lease_key, operation_lease, step_lease
from jobwarden.tasks.reservations import Reservation, announced_key, spend_once, spent
from tests.unit.factories import ACTOR, NOW, operation, reply

MARKER_TTL = 60


@pytest.fixture
def redis() -> Iterator[Redis]:
    client = Redis.from_url(os.environ["JOBWARDEN_REDIS_URL"])
    yield client
    client.close()


@pytest.fixture
def prefix(redis: Redis) -> Iterator[str]:
    name = f"jwtest-lease-{secrets.token_hex(4)}"
    yield name
    for key in redis.scan_iter(f"{name}:*"):
        redis.delete(key)


def _announce(redis: Redis, prefix: str, op: uuid.UUID, ordinal: int) -> None:
    """What a step that reserved request ``ordinal`` leaves behind as it lets go."""
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:
        lease.left_on_row = ordinal  # as settling its last write records it


def _poll(op: uuid.UUID, ordinal: int) -> tuple[Operation, Send]:
    """A row waiting to poll with request ``ordinal`` reserved, and the poll's request."""
    url = f"http://127.0.0.1:1/v1/jobs/{op}"
    row = operation(
        OperationState.observing,
        operation_id=op,
        remote_job_id="job-1",
        status_url=url,
        status_requests_used=ordinal,
        reserved_request=ordinal,
    )
    request = ProviderRequest(purpose=RequestPurpose.status, method="GET", url=url)
    return row, Send(request=request, event=EventKind.poll_sent)


def _spends(lease: Reservation, op: uuid.UUID, ordinal: int) -> bool:
    """Whether a poll of a row that reserved ``ordinal`` may send it on the reservation."""
    return lease.spend(*_poll(op, ordinal)) is not None


def _expired(redis: Redis, prefix: str, op: uuid.UUID) -> AbstractContextManager[Reservation]:
    """A step lease that marked request 1 and was held past its TTL, never let go."""
    held = step_lease(redis, prefix, op, 0.05, MARKER_TTL)
    assert held.__enter__().marked == 1
    wait_for(
        lambda: redis.get(lease_key(prefix, op)) is None, timeout=5, what="the lease to expire"
    )
    return held


def test_nothing_announced_marks_nothing(redis: Redis, prefix: str) -> None:
    op = uuid.uuid4()
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:
        assert lease.marked is None
        assert redis.get(lease_key(prefix, op)) is not None
    assert redis.get(lease_key(prefix, op)) is None  # let go
    assert not spent(redis, prefix, op, 1)


def test_the_next_lease_marks_the_announced_reservation_and_a_spend_keeps_the_mark(
    redis: Redis, prefix: str
) -> None:
    op = uuid.uuid4()
    _announce(redis, prefix, op, 1)
    assert redis.get(announced_key(prefix, op)) == b"1"
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:
        assert (lease.marked, lease.marker_before) == (1, 0)
        # Marked in the acquire's round trip: a redelivery would already see it spent.
        assert spent(redis, prefix, op, 1)
        assert _spends(lease, op, 1) and lease.sent_marked
        lease.left_on_row = 2
    assert spent(redis, prefix, op, 1) and not spent(redis, prefix, op, 2)
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:
        assert (lease.marked, lease.marker_before) == (2, 1)
        assert not _spends(lease, op, 1)  # only the marked ordinal is this lease's to spend
        assert not lease.sent_marked


def test_a_step_that_does_not_send_what_it_marked_lowers_the_mark_again(
    redis: Redis, prefix: str
) -> None:
    op = uuid.uuid4()
    _announce(redis, prefix, op, 1)
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:  # an early wake-up, say
        assert lease.marked == 1 and not lease.sent_marked
        lease.left_on_row = 1  # the reservation is still on the row
    assert not spent(redis, prefix, op, 1)
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:
        assert lease.marked == 1  # still the next step's to spend
        assert _spends(lease, op, 1)
    assert spent(redis, prefix, op, 1)


def test_a_step_that_fails_announces_nothing_and_still_keeps_what_it_may_have_sent(
    redis: Redis, prefix: str
) -> None:
    # A write that failed (a lost fenced race, say) may not have left the reservation its
    # plan settled: only a step that ends without an error tells the next acquire.
    op = uuid.uuid4()
    _announce(redis, prefix, op, 1)
    with (
        pytest.raises(RuntimeError),
        step_lease(redis, prefix, op, 30, MARKER_TTL) as lease,
    ):
        assert _spends(lease, op, 1)
        lease.left_on_row = 2
        raise RuntimeError("the answer's write failed")
    assert redis.get(announced_key(prefix, op)) == b"1"
    assert spent(redis, prefix, op, 1)  # it may have left: never spent again


def test_a_step_lost_after_its_acquire_leaves_the_reservation_spent_for_every_later_one(
    redis: Redis, prefix: str
) -> None:
    op = uuid.uuid4()
    _announce(redis, prefix, op, 1)
    # A worker SIGKILLed after the send: its lease is never let go, only expires.
    _expired(redis, prefix, op)
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:
        # Nothing new to mark, and the fallback refuses it: the poll claims a fresh request.
        assert lease.marked is None
        assert not spend_once(redis, prefix, op, 1, MARKER_TTL)


def test_a_busy_lease_marks_nothing_and_an_expired_holder_changes_nothing_as_it_lets_go(
    redis: Redis, prefix: str
) -> None:
    op = uuid.uuid4()
    _announce(redis, prefix, op, 1)
    # A person's intervention holds it.
    with (
        operation_lease(redis, prefix, op, 30),
        pytest.raises(LeaseNotAcquiredError),
        step_lease(redis, prefix, op, 30, MARKER_TTL),
    ):
        pass
    assert not spent(redis, prefix, op, 1)
    slow = _expired(redis, prefix, op)
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as other:
        assert other.marked is None
        # The first holder wakes up and lets go: it neither lowers the mark nor announces.
        slow.__exit__(None, None, None)
        assert redis.get(lease_key(prefix, op)) is not None  # the new holder's, untouched
        other.left_on_row = 2
    assert spent(redis, prefix, op, 1)
    assert redis.get(announced_key(prefix, op)) == b"2"


def test_an_operation_lease_and_a_step_lease_exclude_each_other_in_both_orders(
    redis: Redis, prefix: str
) -> None:
    op = uuid.uuid4()
    with operation_lease(redis, prefix, op, 30):
        assert 0 < redis.pttl(lease_key(prefix, op)) <= 30_000  # always with a TTL
        with pytest.raises(LeaseNotAcquiredError), step_lease(redis, prefix, op, 30, MARKER_TTL):
            pass
        with pytest.raises(LeaseNotAcquiredError), operation_lease(redis, prefix, op, 30):
            pass
    with (
        step_lease(redis, prefix, op, 30, MARKER_TTL),
        pytest.raises(LeaseNotAcquiredError),
        operation_lease(redis, prefix, op, 30),
    ):
        pass
    with operation_lease(redis, prefix, op, 30):  # each let go: free again
        pass
    assert redis.get(lease_key(prefix, op)) is None


def _counting_attempts(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[bool]]:
    """Every attempt at a lease from now on, True if it took it; the event: one was refused."""
    refused, attempts = threading.Event(), []
    take = leases._take

    def counted(*args: Any) -> Any:
        got = take(*args)
        attempts.append(got is not None)
        if got is None:
            refused.set()
        return got

    monkeypatch.setattr(leases, "_take", counted)
    return refused, attempts


def test_a_waiting_operation_lease_acquires_once_the_step_lease_is_let_go(
    redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = uuid.uuid4()
    took, done = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def intervene() -> None:
        try:
            with operation_lease(redis, prefix, op, 30, wait_seconds=30):
                took.set()
                done.wait(timeout=10)
        except BaseException as exc:  # handed to the test's thread, which fails on it
            failed.append(exc)

    held = step_lease(redis, prefix, op, 30, MARKER_TTL)
    held.__enter__()
    refused, attempts = _counting_attempts(monkeypatch)
    person = threading.Thread(target=intervene)
    person.start()
    try:
        assert refused.wait(timeout=10), "the intervention never found the lease held"
        assert not took.is_set()
    finally:
        held.__exit__(None, None, None)
    assert took.wait(timeout=10), failed
    assert attempts[0] is False and attempts[-1] is True
    # The intervention holds it now.
    with pytest.raises(LeaseNotAcquiredError), step_lease(redis, prefix, op, 30, MARKER_TTL):
        pass
    done.set()
    person.join(timeout=10)
    assert not person.is_alive() and failed == []
    assert redis.get(lease_key(prefix, op)) is None


def test_a_waiting_operation_lease_gives_up_once_its_wait_passed(
    redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = uuid.uuid4()
    with step_lease(redis, prefix, op, 30, MARKER_TTL):
        _, attempts = _counting_attempts(monkeypatch)
        started = time.monotonic()
        with (
            pytest.raises(LeaseNotAcquiredError),
            operation_lease(redis, prefix, op, 30, wait_seconds=0.3),
        ):
            pass
        assert time.monotonic() - started >= 0.3
        # Tried again every RETRY_SECONDS, bounded: never a busy loop, never one attempt.
        assert 2 <= len(attempts) <= 1 + 0.3 / leases.RETRY_SECONDS + 1
        assert not any(attempts)
        del attempts[:]
        with pytest.raises(LeaseNotAcquiredError), operation_lease(redis, prefix, op, 30):
            pass
        assert attempts == [False]  # no wait: one attempt


def test_an_operation_lease_let_go_after_its_ttl_leaves_the_next_holder_alone(
    redis: Redis, prefix: str
) -> None:
    op = uuid.uuid4()
    slow = operation_lease(redis, prefix, op, 0.05)
    slow.__enter__()
    wait_for(
        lambda: redis.get(lease_key(prefix, op)) is None, timeout=5, what="the lease to expire"
    )
    with operation_lease(redis, prefix, op, 30):
        token = redis.get(lease_key(prefix, op))
        slow.__exit__(None, None, None)  # wakes up and lets go: changes nothing
        assert token is not None and redis.get(lease_key(prefix, op)) == token
    assert redis.get(lease_key(prefix, op)) is None


def test_both_leases_exclude_a_redis_py_lock_on_the_same_key_and_it_them(
    redis: Redis, prefix: str
) -> None:
    # redis-py's Lock held operation leases before: during a rolling deploy an older
    # worker's lock and a newer one's lease must still exclude each other.
    op = uuid.uuid4()
    lock = redis.lock(lease_key(prefix, op), timeout=30, blocking=False, thread_local=False)
    assert lock.acquire()
    with pytest.raises(LeaseNotAcquiredError), operation_lease(redis, prefix, op, 30):
        pass
    with pytest.raises(LeaseNotAcquiredError), step_lease(redis, prefix, op, 30, MARKER_TTL):
        pass
    lock.release()
    with operation_lease(redis, prefix, op, 30):
        assert not lock.acquire()
    with step_lease(redis, prefix, op, 30, MARKER_TTL):
        assert not lock.acquire()


def _planned(op: Operation, decided: Decided, answer: RawResponse | None = None) -> Plan:
    return plan(op, decided, actor=ACTOR, now=NOW, answer=answer, max_countdown=60)


def test_a_settled_answer_carries_the_spent_reservation_over_the_row_it_was_spent_on(
    redis: Redis, prefix: str
) -> None:
    op = uuid.uuid4()
    _announce(redis, prefix, op, 1)
    row, send = _poll(op, 1)
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:
        leaving = lease.spend(row, send)
        assert leaving is not None and leaving.reserved_request is None
        wait = Wait(
            until=NOW + timedelta(seconds=5),
            delay_seconds=5,
            delay_source=DelaySource.local_backoff,
            clipped_to_deadline=False,
        )
        written_over, p = lease.settle(leaving, _planned(leaving, Decided(action=wait), reply(200)))
        assert written_over is row  # the fence: the row as stored, not as the request left it
        (polled,) = p.events
        assert polled.excerpt is not None and polled.excerpt["request"] == 1
        assert (p.changes["status_requests_used"], p.changes["reserved_request"]) == (2, 2)
        assert lease.left_on_row == 2
    assert redis.get(announced_key(prefix, op)) == b"2"


def test_a_reserved_request_not_sent_after_all_is_not_recorded_and_stays_spent(
    redis: Redis, prefix: str
) -> None:
    op = uuid.uuid4()
    _announce(redis, prefix, op, 1)
    row, send = _poll(op, 1)
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:
        assert lease.spend(row, send) is not None
        # Its deadline passed before it left (steps.unsent): decided on the row as stored.
        detail = "result deadline passed; reserved request not sent"
        stop = escalate(row.state, EscalationReason.deadline_exceeded, detail)
        written_over, p = lease.settle(row, _planned(row, Decided(action=stop)))
        assert written_over is row
        assert [e.kind for e in p.events] == [EventKind.escalated]
        # Marked and perhaps sent, as far as Redis knows: counted and unused, never returned.
        assert "reserved_request" not in p.changes and "status_requests_used" not in p.changes
    assert spent(redis, prefix, op, 1)
