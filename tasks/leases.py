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
    redis: Redis, prefix: str, operation_id: uuid.UUID, ttl_seconds: float
) -> Iterator[None]:
    """Hold the operation's lease for the block, or raise LeaseNotAcquiredError at once."""
    lock = redis.lock(
        lease_key(prefix, operation_id), timeout=ttl_seconds, blocking=False, thread_local=False
    )
    if not lock.acquire():
        raise LeaseNotAcquiredError(str(operation_id))
    try:
        yield
    finally:
        # Expired and perhaps taken by another worker: its fence protects the row.
        with suppress(LockError):
            lock.release()
