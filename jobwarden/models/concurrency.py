"""Concurrency keys: which operations may start now, and who is next when one ends.

A submission may name a ``concurrency_key`` (``deploy:payments:production``); at
most ``limit`` unfinished operations of one tenant hold it at a time. Holders are
the key's operations in any state that is neither terminal nor ``queued``:
escalations and every stopped state keep the key until a human decides, because
a deploy stopped half-way still occupies its target. The others wait in
``queued``, durably and in submission order, holding no worker and no lease.

Pure: counts and frozen snapshots in, decisions out. The store
(models/persistence/concurrency_store.py) reads under a per-key lock; the shell
(tasks/concurrency.py) writes what these functions decide.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Final

from jobwarden.models.actions import Decided, Record
from jobwarden.models.contracts.contract import ConcurrencySpec
from jobwarden.models.contracts.fields import count
from jobwarden.models.contracts.sections import ContractTable
from jobwarden.models.errors import InvalidSubmissionError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.approvals import window_end
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.states import TERMINAL, WAITING_FOR_ROOM, OperationState

S = OperationState

# A key is an identifier people read in logs and URLs: letters, digits and a few
# separators, starting with a letter or digit (no spaces, no control characters).
KEY_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+=-]*\Z")
KEY_CHARACTERS: Final = "letters, digits and . _ : / @ + = -"
# A limit beyond this is no longer flow control: the contract probably meant something else.
MAX_LIMIT: Final = 10_000
DEFAULT_LIMIT: Final = 1


def check_concurrency_key(value: object, *, max_length: int) -> str | None:
    """The key as given, or None when left out; InvalidSubmissionError names the rule."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidSubmissionError(
            f"concurrency_key must be a string, got {type(value).__name__}"
        )
    if not value:
        raise InvalidSubmissionError("concurrency_key must not be empty (leave it out instead)")
    if len(value) > max_length:
        raise InvalidSubmissionError(f"concurrency_key is longer than {max_length} characters")
    if not KEY_PATTERN.match(value):
        raise InvalidSubmissionError(
            f"concurrency_key may hold only {KEY_CHARACTERS}, starting with a letter or digit"
        )
    return value


class ConcurrencyTable(ContractTable):
    """``[concurrency] limit = N``: the limit of every key this contract's operations name."""

    builds = ConcurrencySpec
    limit: Annotated[int, count(maximum=MAX_LIMIT)] = DEFAULT_LIMIT


def key_limit(spec: ConcurrencySpec | None) -> int:
    """A submission may name a key the contract says nothing about: it is then a lock."""
    return spec.limit if spec is not None else DEFAULT_LIMIT


def holds_key(state: OperationState) -> bool:
    """Whether an operation in ``state`` occupies its concurrency key."""
    return state not in TERMINAL and state not in WAITING_FOR_ROOM


@dataclass(frozen=True, slots=True, kw_only=True)
class Occupancy:
    """A key's unfinished operations, counted under the key's lock."""

    holders: int
    queued: int
    # The smallest limit among the holders (None without holders): two contracts may
    # name one key with different limits, and a holder that asked for a lock keeps it.
    strictest: int | None = None


def admits_now(occupancy: Occupancy, limit: int) -> bool:
    """Whether a new submission may start now rather than queue.

    Nobody overtakes a queued operation, even in the moment between a holder's end
    and its hand-over when the key has room: submission order is the promise.
    """
    cap = min(limit, occupancy.strictest or limit)
    return occupancy.queued == 0 and occupancy.holders < cap


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """A queued operation, as the hand-over sees it (oldest first)."""

    operation_id: uuid.UUID
    limit: int
    requires_approval: bool


def next_to_admit(room: Occupancy, queue: Sequence[Waiting]) -> list[Waiting]:
    """The queued operations to admit now, oldest first.

    Each is admitted only while the holders, those admitted before it and it itself
    all allow that many: the smallest limit among them wins. Stops at the first that
    does not fit, so nobody overtakes an earlier operation (strict submission order).
    """
    admitted: list[Waiting] = []
    cap = room.strictest
    for waiting in queue:
        cap = waiting.limit if cap is None else min(cap, waiting.limit)
        if room.holders + len(admitted) >= cap:
            break
        admitted.append(waiting)
    return admitted


def admitted_state(requires_approval: bool) -> OperationState:
    """Where an admitted operation goes: as a fresh submission of its contract would start."""
    return S.awaiting_approval if requires_approval else S.create_pending


def admission(
    op: Operation,
    *,
    to: OperationState,
    after: uuid.UUID | None,
    now: datetime,
    approval_window: timedelta,
) -> Decided:
    """The write that admits queued ``op``: into ``to``, with the deadlines it waited off.

    The provider's create and result deadlines bound the remote job, not the wait for
    the key, so both move by the time spent queued (the history records both). Admitted
    into awaiting_approval, its approval window (``approval_window``, the contract's)
    starts now.
    """
    if op.state is not S.queued:
        raise ValueError(f"only a queued operation is admitted, not {op.state.value}")
    waited = now - op.created_at
    create_by, result_by = op.create_deadline + waited, op.result_deadline + waited
    changes: RowChanges = {"create_deadline": create_by, "result_deadline": result_by}
    if to is S.awaiting_approval:
        # The window's end is a parked timer: the sweeper wakes the step that ends it.
        end = window_end(now, approval_window, op.business_deadline)
        changes |= {"next_poll_at": end, "dispatched_at": None}
    record = Record(
        event=EventKind.admitted,
        to=to,
        cause=f"concurrency key {op.concurrency_key} had room",
        excerpt={
            "concurrency_key": op.concurrency_key,
            "after": str(after) if after is not None else None,
            "waited_seconds": round(waited.total_seconds(), 3),
            "create_deadline": create_by.isoformat(),
            "result_deadline": result_by.isoformat(),
        },
        # create_pending is due at once (the sweeper re-sends a lost wake-up); awaiting
        # approval is due when its window ends (set in ``changes``).
        wake_at=now if to is S.create_pending else None,
    )
    return Decided(action=record, changes=changes)


def handed_over(ended: Operation, admitted: Sequence[uuid.UUID]) -> Decided:
    """The event on an ended holder naming who got its key (no state change)."""
    record = Record(
        event=EventKind.key_handed_over,
        cause=f"concurrency key {ended.concurrency_key} handed over",
        excerpt={
            "concurrency_key": ended.concurrency_key,
            "to": [str(a) for a in admitted],
        },
    )
    return Decided(action=record)
