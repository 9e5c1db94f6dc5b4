"""The hand-over: when a holder of a concurrency key ends, the next queued operation starts.

Runs after the commit that ended the holder, in a transaction of its own under the
key's lock (models/persistence/concurrency_store.py ``lock_key``), so intake's admission and
every hand-over of one key are serialised. If the process dies between the
holder's last commit and this, nothing is lost: the sweeper's pass
(``admit_stranded``) finds the key with room and a queue and admits the same way.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from jobwarden.models.actions import Decided
from jobwarden.models.concurrency import (
    Waiting,
    admission,
    admitted_state,
    handed_over,
    next_to_admit,
)
from jobwarden.models.errors import StaleVersionError
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import concurrency_store, store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import TERMINAL, OperationState
from jobwarden.tasks import faults
from jobwarden.tasks.dispatch import enqueue
from jobwarden.tasks.provider.wakeup_backlog import Owner, owner_of
from jobwarden.tasks.runtime import Runtime, utcnow
from jobwarden.tasks.steps import planned

log = logging.getLogger("jobwarden.tasks")

# Admitted in one hand-over at most: a key's limit is usually 1; a larger queue moves on
# as each admitted operation ends.
MAX_ADMITTED_PER_HAND_OVER = 100
# Keys the sweeper's pass looks at per sweep.
MAX_STRANDED_KEYS_PER_SWEEP = 100


def hand_over(
    rt: Runtime, tenant: str, key: str, *, ended: uuid.UUID | None = None
) -> list[uuid.UUID]:
    """Admit the key's oldest queued operations while it has room; returns those admitted.

    ``ended`` is the holder whose end made room (it gets a ``key_handed_over`` event);
    without one, the key's most recently ended operation is named. A concurrent writer
    of the same rows (a person cancelling a queued operation) makes this give up
    (StaleVersionError, rolled back); the sweeper's pass tries again.
    """
    admitted: list[tuple[uuid.UUID, OperationState, Owner]] = []
    with transaction(rt.settings.database_url) as session:
        concurrency_store.lock_key(session, tenant, key)
        now = utcnow()  # after the wait for the lock: the events follow the holder's end
        room = concurrency_store.occupancy(session, tenant, key)
        waiting = concurrency_store.queue(session, tenant, key, limit=MAX_ADMITTED_PER_HAND_OVER)
        chosen = next_to_admit(
            room,
            [
                Waiting(
                    operation_id=op.operation_id,
                    limit=op.concurrency_limit or 1,
                    requires_approval=rt.contract_for(op).requires_approval,
                )
                for op in waiting
            ],
        )
        if not chosen:
            return []
        by_id = {op.operation_id: op for op in waiting}
        holder = _holder(session, tenant, key, ended)
        after = holder.operation_id if holder is not None else None
        for w in chosen:
            to = admitted_state(w.requires_approval)
            queued = by_id[w.operation_id]
            window = timedelta(seconds=rt.contract_for(queued).limits.approval_window_seconds)
            decided = admission(queued, to=to, after=after, now=now, approval_window=window)
            _write(rt, session, queued, decided, now)
            admitted.append((w.operation_id, to, owner_of(queued)))
        if holder is not None:
            _write(rt, session, holder, handed_over(holder, [a for a, _, _ in admitted]), now)
    for op_id, state, owner in admitted:
        log.info("key_handed_over key=%s operation_id=%s after=%s", key, op_id, after)
        if state is OperationState.create_pending:
            # An approval's wait is parked until its window ends; only a create is due now.
            enqueue(rt, op_id, state, owner=owner)
    return [op_id for op_id, _, _ in admitted]


def _write(rt: Runtime, session: Session, op: Operation, decided: Decided, now: datetime) -> None:
    # Several rows in the key lock's one transaction, each fenced on the version read.
    store.write(session, op, planned(rt, op, decided, now), now=now)


def _holder(session: Session, tenant: str, key: str, ended: uuid.UUID | None) -> Operation | None:
    if ended is not None:
        found = store.load(session, ended)
        if found is not None and found.state in TERMINAL:
            return found
    return concurrency_store.last_ended(session, tenant, key)


def after_end(rt: Runtime, op: Operation) -> None:
    """Call after any commit that may have ended ``op``: hands its key over if it did.

    Never raises: the holder's end is committed whatever happens here, and a hand-over
    that failed (a lost race, a dropped connection) is redone by the sweeper's pass.
    """
    if op.concurrency_key is None or op.state not in TERMINAL:
        return
    # A death here leaves the end committed and the queue waiting: the sweeper's pass.
    faults.fault_point(rt.redis, rt.settings.key_prefix, "before_hand_over", op.idempotency_key)
    try:
        hand_over(rt, op.tenant, op.concurrency_key, ended=op.operation_id)
    except StaleVersionError:
        log.info("hand_over_raced operation_id=%s key=%s", op.operation_id, op.concurrency_key)
    except Exception as exc:  # the end is committed; the sweeper admits the queue later
        log.warning(
            "hand_over_failed operation_id=%s key=%s error=%s",
            op.operation_id,
            op.concurrency_key,
            type(exc).__name__,
        )


def admit_stranded(rt: Runtime) -> int:
    """The sweeper's pass: hand over every key that has room and a queue; returns admitted."""
    with transaction(rt.settings.database_url) as session:
        keys = concurrency_store.stranded_keys(session, limit=MAX_STRANDED_KEYS_PER_SWEEP)
    admitted = 0
    for tenant, key in keys:
        try:
            admitted += len(hand_over(rt, tenant, key))
        except StaleVersionError:
            continue  # a person or another sweeper moved a row: the next sweep looks again
    return admitted
