"""Operation leases: a Redis lock with a TTL, never waited for.

The lease only keeps two workers from working one operation at the same
time; correctness comes from the row version every write is fenced by (a
lease can expire while its holder is paused).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from redis import Redis
from redis.exceptions import LockError

from jobwarden.models.errors import LeaseNotAcquiredError


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


# Compare-and-raise: the marker holds the highest reserved request ordinal whose send was
# attempted; a lower or equal one is refused, so each reservation is spent at most once.
_SPEND_ONCE = """
local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
if seen >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""


def reservation_key(prefix: str, operation_id: uuid.UUID) -> str:
    return f"{prefix}:reserved:{operation_id}"


def spend_once(
    redis: Redis, prefix: str, operation_id: uuid.UUID, ordinal: int, ttl_seconds: int
) -> bool:
    """Mark reserved request ``ordinal`` as about to be sent; False if it already was.

    Set under the lease and before the send, so a redelivered message, which finds the
    same reservation on the row, knows its request may have left and claims a fresh one.
    The marker must outlive any redelivery of the message (the broker's visibility
    timeout); if Redis loses it, the sweeper's redispatch drops the reservation anyway.
    """
    script = _scripts.get(id(redis))
    if script is None or script.registered_client is not redis:
        script = _scripts[id(redis)] = redis.register_script(_SPEND_ONCE)
    return bool(script(keys=[reservation_key(prefix, operation_id)], args=[ordinal, ttl_seconds]))


# One registered script per client: registering hashes the script text each time.
_scripts: dict[int, Any] = {}


def spent(redis: Redis, prefix: str, operation_id: uuid.UUID, ordinal: int) -> bool:
    """Whether an attempt to send reserved request ``ordinal`` was ever marked."""
    seen = redis.get(reservation_key(prefix, operation_id))
    return seen is not None and int(seen) >= ordinal
