"""Operation leases: a Redis lock with a TTL, never waited for.

The lease only keeps two workers from working one operation at the same
time; correctness comes from the row version every write is fenced by (a
lease can expire while its holder is paused).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

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
