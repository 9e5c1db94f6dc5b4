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
from dataclasses import dataclass
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


def announced_key(prefix: str, operation_id: uuid.UUID) -> str:
    return f"{prefix}:reserved-next:{operation_id}"


def spend_once(
    redis: Redis, prefix: str, operation_id: uuid.UUID, ordinal: int, ttl_seconds: int
) -> bool:
    """Mark reserved request ``ordinal`` as about to be sent; False if it already was.

    Set under the lease and before the send, so a redelivered message, which finds the
    same reservation on the row, knows its request may have left and claims a fresh one.
    The marker must outlive any redelivery of the message (the broker's visibility
    timeout); if Redis loses it, the sweeper's redispatch drops the reservation anyway.
    """
    script = _script(redis, _SPEND_ONCE)
    return bool(script(keys=[reservation_key(prefix, operation_id)], args=[ordinal, ttl_seconds]))


# One registered script per (client, script): registering hashes the script text each time.
_scripts: dict[tuple[int, str], Any] = {}


def _script(redis: Redis, text: str) -> Any:
    script = _scripts.get((id(redis), text))
    if script is None or script.registered_client is not redis:
        script = _scripts[(id(redis), text)] = redis.register_script(text)
    return script


def spent(redis: Redis, prefix: str, operation_id: uuid.UUID, ordinal: int) -> bool:
    """Whether an attempt to send reserved request ``ordinal`` was ever marked."""
    seen = redis.get(reservation_key(prefix, operation_id))
    return seen is not None and int(seen) >= ordinal


# --- a worker step's lease, which also marks the announced reservation ----------------
#
# A poll's decision reserves the next status request in its commit, and the step that
# made it announces the ordinal when it lets the lease go. The next step's acquire raises
# the spend marker to that ordinal in the same round trip, so the reserved request leaves
# with no Redis call between the lease and the send. Marking before the row is read is
# conservative: a step that does not send what it marked lowers the marker again as it
# lets go, and one that dies before that leaves the reservation spent-looking, so the
# next attempt claims a fresh, counted request (what a crash after spend_once did).

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


@dataclass(slots=True)
class StepLease:
    """A held step lease: the reservation its acquire marked, and what the step did."""

    marked: int | None  # the reserved request ordinal marked as about to be sent
    marked_over: int  # the marker's value before (0: none)
    spent_marked: bool = False  # the step sent, or may have sent, the marked request
    announce: int | None = None  # the reservation the step's commit left on the row

    def spend(self, ordinal: int) -> bool:
        """Whether ``ordinal`` is the request this lease marked; if so it is now spent."""
        if self.marked is None or self.marked != ordinal:
            return False
        self.spent_marked = True
        return True

    def unspent_mark(self, ordinal: int) -> bool:
        """Whether ``ordinal`` is the marked request and this step has not sent it."""
        return self.marked == ordinal and not self.spent_marked


@contextmanager
def step_lease(
    redis: Redis, prefix: str, operation_id: uuid.UUID, ttl_seconds: float, marker_ttl: int
) -> Iterator[StepLease]:
    """A worker step's lease (never waited for), marking the announced reservation.

    Raises LeaseNotAcquiredError when another owner holds it. The same key and token
    discipline as ``operation_lease``, so the two exclude each other.
    """
    keys = [
        lease_key(prefix, operation_id),
        reservation_key(prefix, operation_id),
        announced_key(prefix, operation_id),
    ]
    token = secrets.token_hex(16)
    got = _script(redis, _ACQUIRE)(
        keys=keys, args=[token, max(1, int(ttl_seconds * 1000)), marker_ttl]
    )
    if got is None:
        raise LeaseNotAcquiredError(str(operation_id))
    want, seen = int(got[0]), int(got[1])
    lease = StepLease(marked=want or None, marked_over=seen)
    try:
        yield lease
    finally:
        restore = lease.marked is not None and not lease.spent_marked
        _script(redis, _RELEASE)(
            keys=keys,
            args=[
                token,
                lease.marked or "",
                lease.marked_over if restore else "",
                lease.announce if lease.announce is not None else "",
                marker_ttl,
            ],
        )
