"""Operation leases: a Redis key with a TTL and a random token, one mechanism for all.

The lease only keeps two workers from working one operation at the same
time; correctness comes from the row version every write is fenced by (a
lease can expire while its holder is paused).

A holder takes the lease with ``SET NX PX`` of its own token and lets go with a
compare-and-delete, both in Lua, so a release after expiry (perhaps another holder's
lease by then) changes nothing. ``operation_lease`` serves writers outside a step (no
wait) and humans' interventions (a bounded wait); ``step_lease`` is a worker step's: its
acquire also marks the announced reservation in the same round trip, and it yields the
operation's ``Reservation`` (``tasks/reservations.py``). Both take the same key through
the same two scripts, so they exclude each other. redis-py's ``Lock``, which held
operation leases before, takes the same key the same way, so an older worker's lock
still excludes them during a rolling deploy (pinned by a test against the library's own
``Lock``).
"""

from __future__ import annotations

import math
import secrets
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from redis import Redis

from jobwarden.models.errors import LeaseNotAcquiredError
from jobwarden.tasks.reservations import Reservation, announced_key, marker_key
from jobwarden.tasks.runtime import script


def lease_key(prefix: str, operation_id: uuid.UUID) -> str:
    return f"{prefix}:lease:{operation_id}"


# KEYS[1] is the lease. A step lease also passes the reservation's marker and announced
# ordinal (KEYS[2], KEYS[3]); a plain lease passes the lease alone and stops there.
# The acquire raises the marker to the announced ordinal: {marked (0: none), marker before}.
_ACQUIRE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
if #KEYS == 1 then return {0, 0} end
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
local want = tonumber(redis.call('GET', KEYS[3]) or '0')
if want > seen then
  redis.call('SET', KEYS[2], want, 'EX', ARGV[3])
  return {want, seen}
end
return {0, seen}
"""

# Only the holder lets go. A step lease then lowers the marker it raised unless its step
# sent the request (ARGV[3], '' keeps it), and announces its commit's reservation (ARGV[4]).
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if #KEYS == 1 then return 1 end
if ARGV[3] ~= '' and redis.call('GET', KEYS[2]) == ARGV[2] then
  if ARGV[3] == '0' then redis.call('DEL', KEYS[2])
  else redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[5]) end
end
if ARGV[4] ~= '' then redis.call('SET', KEYS[3], ARGV[4], 'EX', ARGV[5]) end
return 1
"""

# How often a waiting intervention tries again: redis-py's Lock, used here before, polled
# at the same interval.
RETRY_SECONDS = 0.1


def _take(redis: Redis, keys: list[str], token: str, ttl_seconds: float, *args: object) -> Any:
    """One attempt at the lease: the acquire script's reply, None while another holds it."""
    acquire = script(redis, _ACQUIRE)
    return acquire(keys=keys, args=[token, max(1, int(ttl_seconds * 1000)), *args])


def _let_go(redis: Redis, keys: list[str], token: str, *args: object) -> None:
    script(redis, _RELEASE)(keys=keys, args=[token, *args])


def _taken_within(
    redis: Redis, keys: list[str], token: str, ttl_seconds: float, wait_seconds: float
) -> bool:
    """Try until the lease is taken or ``wait_seconds`` passed (0: one attempt)."""
    give_up_at = time.monotonic() + wait_seconds
    # Bounded by the attempts the wait allows as well as by the clock.
    for _ in range(1 + math.ceil(wait_seconds / RETRY_SECONDS)):
        if _take(redis, keys, token, ttl_seconds) is not None:
            return True
        left = give_up_at - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(RETRY_SECONDS, left))
    return False


@contextmanager
def operation_lease(
    redis: Redis,
    prefix: str,
    operation_id: uuid.UUID,
    ttl_seconds: float,
    *,
    wait_seconds: float = 0.0,
) -> Iterator[None]:
    """Hold the operation's lease for the block, or raise LeaseNotAcquiredError.

    Workers never wait (``wait_seconds=0``): a busy lease means another owner is on
    it. A human's intervention may wait briefly for an in-flight step to finish, trying
    again every ``RETRY_SECONDS`` until ``wait_seconds`` passed.
    """
    keys = [lease_key(prefix, operation_id)]
    token = secrets.token_hex(16)
    if not _taken_within(redis, keys, token, ttl_seconds, wait_seconds):
        raise LeaseNotAcquiredError(str(operation_id))
    try:
        yield
    finally:
        # Expired and perhaps taken by another worker: its fence protects the row.
        _let_go(redis, keys, token)


@contextmanager
def step_lease(
    redis: Redis, prefix: str, operation_id: uuid.UUID, ttl_seconds: float, marker_ttl: int
) -> Iterator[Reservation]:
    """A worker step's lease (never waited for), yielding the operation's ``Reservation``
    with the announced reservation marked in the acquire's round trip.

    Raises LeaseNotAcquiredError when another owner holds it. Letting go lowers the mark
    again if the step did not send it, and, when the step ended without an error,
    announces the reservation its last write left on the row to the next acquire.
    """
    keys = [
        lease_key(prefix, operation_id),
        marker_key(prefix, operation_id),
        announced_key(prefix, operation_id),
    ]
    token = secrets.token_hex(16)
    got = _take(redis, keys, token, ttl_seconds, marker_ttl)
    if got is None:
        raise LeaseNotAcquiredError(str(operation_id))
    want, seen = int(got[0]), int(got[1])
    reservation = Reservation(
        redis=redis,
        prefix=prefix,
        operation_id=operation_id,
        marker_ttl=marker_ttl,
        marked=want or None,
        marker_before=seen,
    )
    announced: int | None = None
    try:
        yield reservation
        announced = reservation.left_on_row
    finally:
        restored = reservation.restored_marker
        _let_go(
            redis,
            keys,
            token,
            reservation.marked or "",
            "" if restored is None else restored,
            "" if announced is None else announced,
            marker_ttl,
        )
