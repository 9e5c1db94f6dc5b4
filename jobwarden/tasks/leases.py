"""Operation leases: a Redis lock with a TTL, never waited for.

The lease only keeps two workers from working one operation at the same
time; correctness comes from the row version every write is fenced by (a
lease can expire while its holder is paused).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from redis import Redis
from redis.exceptions import LockError

from jobwarden.models.errors import LeaseNotAcquiredError
from jobwarden.tasks.reservations import Marking, announced_key, marker_key
from jobwarden.tasks.runtime import script


def lease_key(prefix: str, operation_id: uuid.UUID) -> str:
    return f"{prefix}:lease:{operation_id}"


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
    it. A human's intervention may wait briefly for an in-flight step to finish.
    """
    lock = redis.lock(
        lease_key(prefix, operation_id),
        timeout=ttl_seconds,
        blocking=wait_seconds > 0,
        blocking_timeout=wait_seconds or None,
        thread_local=False,
    )
    if not lock.acquire():
        raise LeaseNotAcquiredError(str(operation_id))
    try:
        yield
    finally:
        # Expired and perhaps taken by another worker: its fence protects the row.
        with suppress(LockError):
            lock.release()


# A step lease's acquire also marks the announced reservation, and its release lowers
# the mark again or announces the next one (the rules: tasks/reservations.py).

_ACQUIRE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
local want = tonumber(redis.call('GET', KEYS[3]) or '0')
if want > seen then
  redis.call('SET', KEYS[2], want, 'EX', ARGV[3])
  return {want, seen}
end
return {0, seen}
"""

# Only the holder lets go; past its TTL (another holder, perhaps) it changes nothing.
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if ARGV[3] ~= '' and redis.call('GET', KEYS[2]) == ARGV[2] then
  if ARGV[3] == '0' then redis.call('DEL', KEYS[2])
  else redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[5]) end
end
if ARGV[4] ~= '' then redis.call('SET', KEYS[3], ARGV[4], 'EX', ARGV[5]) end
return 1
"""


@contextmanager
def step_lease(
    redis: Redis, prefix: str, operation_id: uuid.UUID, ttl_seconds: float, marker_ttl: int
) -> Iterator[Marking]:
    """A worker step's lease (never waited for), marking the announced reservation.

    Raises LeaseNotAcquiredError when another owner holds it. The same key and token
    discipline as ``operation_lease``, so the two exclude each other.
    """
    keys = [
        lease_key(prefix, operation_id),
        marker_key(prefix, operation_id),
        announced_key(prefix, operation_id),
    ]
    token = secrets.token_hex(16)
    got = script(redis, _ACQUIRE)(
        keys=keys, args=[token, max(1, int(ttl_seconds * 1000)), marker_ttl]
    )
    if got is None:
        raise LeaseNotAcquiredError(str(operation_id))
    want, seen = int(got[0]), int(got[1])
    marking = Marking(marked=want or None, marked_over=seen)
    try:
        yield marking
    finally:
        lowered, announce = marking.lowered_to, marking.announce
        script(redis, _RELEASE)(
            keys=keys,
            args=[
                token,
                marking.marked or "",
                "" if lowered is None else lowered,
                "" if announce is None else announce,
                marker_ttl,
            ],
        )
