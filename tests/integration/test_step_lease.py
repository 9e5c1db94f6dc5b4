"""A worker step's lease against the real Redis: it marks the announced reservation as it
is acquired, so the reserved status request leaves with no Redis call before the send
(issue 12), and it never lets a request that may have left be spent again (invariant 3).

Keys live under a private prefix per test and are deleted afterwards.
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager

import pytest
from redis import Redis

from jobwarden.harness import wait_for
from jobwarden.models.errors import LeaseNotAcquiredError
from jobwarden.tasks.leases import lease_key, operation_lease, step_lease
from jobwarden.tasks.reservations import Marking, announced_key, spend_once, spent

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
        lease.announce = ordinal


def _expired(redis: Redis, prefix: str, op: uuid.UUID) -> AbstractContextManager[Marking]:
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
        assert (lease.marked, lease.marked_over) == (1, 0)
        # Marked in the acquire's round trip: a redelivery would already see it spent.
        assert spent(redis, prefix, op, 1)
        assert lease.spend(1)
        lease.announce = 2
    assert spent(redis, prefix, op, 1) and not spent(redis, prefix, op, 2)
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:
        assert (lease.marked, lease.marked_over) == (2, 1)
        assert not lease.spend(1)  # only the marked ordinal is this lease's to spend


def test_a_step_that_does_not_send_what_it_marked_lowers_the_mark_again(
    redis: Redis, prefix: str
) -> None:
    op = uuid.uuid4()
    _announce(redis, prefix, op, 1)
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:  # an early wake-up, say
        assert lease.marked == 1 and lease.unspent_mark(1)
        lease.announce = 1  # the reservation is still on the row
    assert not spent(redis, prefix, op, 1)
    with step_lease(redis, prefix, op, 30, MARKER_TTL) as lease:
        assert lease.marked == 1  # still the next step's to spend
        assert lease.spend(1)
    assert spent(redis, prefix, op, 1)


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
        other.announce = 2
    assert spent(redis, prefix, op, 1)
    assert redis.get(announced_key(prefix, op)) == b"2"
