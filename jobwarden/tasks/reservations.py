"""The reserved status request in the shell: the Redis marker that spends it at most once.

Invariant 3: every status request is counted in a commit before it can leave. A poll's
decision reserves the next one in its own commit, so that poll sends it without a claim
commit and records it with its answer. A reservation never sent stays counted (an unused
reservation, which the invariant accepts); one returned to the budget must be known unsent.

The row says which request is reserved; the marker says whether an attempt to send it
may have happened. It holds the highest reserved ordinal whose send was attempted and is
set under the lease before the send, so a redelivered message, which finds the same
reservation on the row, claims a fresh, counted request instead. A step announces the
reservation its commit left as it lets the lease go, and the next step's acquire raises
the marker to it in the same round trip (``tasks/leases.py``), so the reserved request
leaves with no Redis call between the lease and the send. Marking before the row is read
is conservative: a step that does not send what it marked lowers the marker again as it
lets go, and one that dies first leaves the reservation spent-looking (counted, unused).
The pure half is ``models/reservations.py``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from redis import Redis

from jobwarden.models.actions import Send
from jobwarden.models.effects import Plan
from jobwarden.models.operation import Operation
from jobwarden.models.reservations import (
    reserved_send,
    unused_reservation,
    with_reservation_returned,
)
from jobwarden.tasks.runtime import Runtime, script


def marker_key(prefix: str, operation_id: uuid.UUID) -> str:
    """The highest reserved request ordinal whose send was attempted."""
    return f"{prefix}:reserved:{operation_id}"


def announced_key(prefix: str, operation_id: uuid.UUID) -> str:
    """The reservation the last step's commit left on the row, for the next acquire."""
    return f"{prefix}:reserved-next:{operation_id}"


def marker_ttl(rt: Runtime) -> int:
    """How long a spend marker lives: past any redelivery of the message that set it."""
    return 2 * rt.settings.visibility_timeout_seconds


# Compare-and-raise: a lower or equal ordinal is refused, so each reservation is spent
# at most once.
_SPEND_ONCE = """
local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
if seen >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""


def spend_once(
    redis: Redis, prefix: str, operation_id: uuid.UUID, ordinal: int, ttl_seconds: int
) -> bool:
    """Mark reserved request ``ordinal`` as about to be sent; False if it already was.

    Set under the lease and before the send, so a redelivered message, which finds the
    same reservation on the row, knows its request may have left and claims a fresh one.
    The marker must outlive any redelivery of the message (the broker's visibility
    timeout); if Redis loses it, the sweeper's redispatch drops the reservation anyway.
    """
    spend = script(redis, _SPEND_ONCE)
    return bool(spend(keys=[marker_key(prefix, operation_id)], args=[ordinal, ttl_seconds]))


def spent(redis: Redis, prefix: str, operation_id: uuid.UUID, ordinal: int) -> bool:
    """Whether an attempt to send reserved request ``ordinal`` was ever marked."""
    seen = redis.get(marker_key(prefix, operation_id))
    return seen is not None and int(seen) >= ordinal


@dataclass(slots=True)
class Marking:
    """What a step lease's acquire marked, and what the step did with it."""

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

    @property
    def lowered_to(self) -> int | None:
        """What the marker goes back to as the lease lets go (None: it stays): its value
        before the acquire, when the step did not send what it marked."""
        return self.marked_over if self.marked is not None and not self.spent_marked else None


def settled(rt: Runtime, op: Operation, p: Plan, marking: Marking | None = None) -> Plan:
    """``p``, returning a reservation it leaves unused unless an attempt may have sent it.

    Under the lease, so no other attempt can mark it between the check and the write.
    A reservation this step's own lease marked is known unsent unless the step spent it.
    """
    ordinal = unused_reservation(op, p)
    if ordinal is None:
        return p
    if marking is not None and marking.marked == ordinal:
        if not marking.unspent_mark(ordinal):
            return p
    elif spent(rt.redis, rt.settings.key_prefix, op.operation_id, ordinal):
        return p
    return with_reservation_returned(op, p)


def spendable(rt: Runtime, op: Operation, send: Send, marking: Marking | None) -> Send | None:
    """The reserved request as ``send``, if this is the first attempt to spend it."""
    reserved = reserved_send(op, send)
    if reserved is None or op.reserved_request is None:
        return None
    if marking is not None and marking.spend(op.reserved_request):
        return reserved  # marked by the lease's acquire: no round trip before the send
    ttl = marker_ttl(rt)
    if not spend_once(rt.redis, rt.settings.key_prefix, op.operation_id, op.reserved_request, ttl):
        return None  # an earlier attempt may have sent it: claim a fresh, counted request
    return reserved
