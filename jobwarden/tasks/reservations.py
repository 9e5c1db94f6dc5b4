"""The reserved status request in the shell: the Redis marker that spends it at most once.

Invariant 3: every status request is counted in a commit before it can leave. A poll's
decision reserves the next one in its own commit, so that poll sends it without a claim
commit and records it with its answer. A reservation never sent stays counted (an unused
reservation, which the invariant accepts); one returned to the budget must be known unsent.
A step holds it as one object, ``Reservation``, with two calls: ``spend`` and ``settle``.

The row says which request is reserved; the marker says whether an attempt to send it
may have happened. It holds the highest reserved ordinal whose send was attempted and is
set under the lease before the send, so a redelivered message, which finds the same
reservation on the row, claims a fresh, counted request instead. A step announces the
reservation its last write left as it lets the lease go (only when it ends without an
error: a write that failed left nothing), and the next step's acquire raises
the marker to it in the same round trip (``tasks/leases.py``), so the reserved request
leaves with no Redis call between the lease and the send. Marking before the row is read
is conservative: a step that does not send what it marked lowers the marker again as it
lets go, and one that dies first leaves the reservation spent-looking (counted, unused).
The pure half is ``models/reservations.py``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from redis import Redis

from jobwarden.models.actions import Send
from jobwarden.models.operation import Operation
from jobwarden.models.plan import Plan
from jobwarden.models.reservations import (
    as_sent,
    reserved_send,
    settled,
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


@dataclass(frozen=True, slots=True, kw_only=True)
class _InFlight:
    """A reserved request spent by this step: the row it was spent on, the request as it
    left, and the snapshot handed to the step (its decisions see the request as sent)."""

    row: Operation
    spent: Send
    leaving: Operation


@dataclass(slots=True)
class Reservation:
    """The operation's reserved status request, as one step's lease holds it: two calls.

    ``spend(op, send)`` before a request leaves: may it leave on the reservation the row
    holds, with no claim commit? ``settle(op, plan)`` for every plan the step writes: the
    spent request's record folded in, the next one reserved, an unused one returned. The
    step lease (``tasks/leases.py``) yields one, having marked the announced reservation
    in its acquire; letting go, it lowers that mark if the step did not send it, and
    announces what the step's last write left on the row. A writer outside a step, or a
    step run without that lease, uses ``unmarked``: the Redis marker alone then decides.
    """

    redis: Redis
    prefix: str
    operation_id: uuid.UUID
    marker_ttl: int
    marked: int | None = None  # the ordinal the lease's acquire marked as about to be sent
    marker_before: int = 0  # the marker's value before that acquire (0: none)
    sent_marked: bool = False  # the step spent the marked request: it may have left
    left_on_row: int | None = None  # the reservation the step's last settled plan leaves
    _in_flight: _InFlight | None = field(default=None, init=False, repr=False)

    def spend(self, op: Operation, send: Send) -> Operation | None:
        """``op`` as ``send`` leaves on the reservation the row holds, if it may: a status
        request, and the first attempt to spend that reservation. Its claim then rides on
        the next plan settled over the snapshot returned. None: ``send`` needs a claim
        commit of its own first (invariant 3).
        """
        reserved = reserved_send(op, send)
        ordinal = op.reserved_request
        if reserved is None or ordinal is None:
            return None
        if self.marked == ordinal:
            self.sent_marked = True  # marked by the lease's acquire: no round trip now
        elif not spend_once(self.redis, self.prefix, self.operation_id, ordinal, self.marker_ttl):
            return None  # an earlier attempt may have sent it: claim a fresh, counted request
        leaving = as_sent(op, reserved)
        self._in_flight = _InFlight(row=op, spent=reserved, leaving=leaving)
        return leaving

    def settle(self, op: Operation, p: Plan) -> tuple[Operation, Plan]:
        """``p`` as it must be written, and the row it is written over.

        ``op`` is the snapshot ``p`` was decided on. When it is the one ``spend`` returned,
        ``p`` records the reserved request's answer: its claim is folded in, and the row is
        the one it was spent on. Otherwise (the deadline passed before it left) it stays
        spent, counted and unused. Then the next status request is reserved if ``p`` waits
        for a poll, and a reservation ``p`` leaves unused goes back to the budget unless an
        attempt may have sent it: under the lease, so nobody marks it in between.
        """
        in_flight, self._in_flight = self._in_flight, None
        answered = None
        if in_flight is not None and op is in_flight.leaving:
            op, answered = in_flight.row, in_flight.spent
        p = settled(op, p, spent=answered)
        ordinal = unused_reservation(op, p)
        if ordinal is not None and not self._may_have_left(ordinal):
            p = with_reservation_returned(op, p)
        self.left_on_row = p.changes.get("reserved_request", op.reserved_request)
        return op, p

    @property
    def restored_marker(self) -> int | None:
        """The marker's value once the lease lets go, None when it stays as it is: its
        value before the acquire, if the step did not send what the acquire marked."""
        return self.marker_before if self.marked is not None and not self.sent_marked else None

    def _may_have_left(self, ordinal: int) -> bool:
        if self.marked == ordinal:
            return self.sent_marked
        return spent(self.redis, self.prefix, self.operation_id, ordinal)


def unmarked(rt: Runtime, operation_id: uuid.UUID) -> Reservation:
    """The reservation of a writer that holds no step lease: nothing marked on acquire."""
    return Reservation(
        redis=rt.redis,
        prefix=rt.settings.key_prefix,
        operation_id=operation_id,
        marker_ttl=marker_ttl(rt),
    )
