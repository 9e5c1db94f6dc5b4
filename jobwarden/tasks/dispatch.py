"""Wake-up messages: which task acts in which state, and how it is published.

Messages carry only an operation id and are published after the commit that
made them due; a lost one is re-sent by the sweeper, so publishing never fails
a caller. Intake, interventions and the tasks all publish through here. A wake-up whose
owner (provider, tenant, priority) is given goes out at its tenant's fair priority level
in the broker (tasks/provider/wakeup_backlog.py); without one, at level 0.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime

from jobwarden.config.celery_app import app
from jobwarden.models.states import OperationState as S
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.provider.wakeup_backlog import FRONT, Owner, placed, uncounted
from jobwarden.tasks.runtime import Runtime, utcnow

log = get_logger("jobwarden.tasks")

TASK_FOR_STATE: Mapping[S, str] = {
    S.create_pending: "jobwarden.create",
    S.create_unknown: "jobwarden.reconcile",
    S.reconciling: "jobwarden.reconcile",
    S.accepted: "jobwarden.poll",
    S.observing: "jobwarden.poll",
    S.cancelling: "jobwarden.poll",
    S.cancel_requested: "jobwarden.cancel",
    S.result_collecting: "jobwarden.collect",
    S.cleanup_pending: "jobwarden.cleanup",
    S.cleaning_up: "jobwarden.cleanup",
    # Due only when its approval window ends: the step ends it unapproved (approval_expired).
    S.awaiting_approval: "jobwarden.approval_window",
}


def enqueue(
    rt: Runtime,
    operation_id: uuid.UUID,
    state: S,
    countdown: float = 0.0,
    owner: Owner | None = None,
) -> bool:
    """Publish a wake-up; on broker failure the sweeper re-sends it later (returns False).

    ``owner``: whose it is, which places it in the broker (None: level 0, uncounted)."""
    name = TASK_FOR_STATE.get(state)
    if name is None:
        return False
    args = [str(operation_id)]
    (place,) = placed(rt, [owner]) if owner is not None else (FRONT,)
    queue = rt.settings.queue
    try:
        app.send_task(
            name,
            args=args,
            countdown=max(0.0, countdown) or None,
            queue=queue,
            retry=False,
            # A wake-up's answer is the row, not a result: no result key, no subscription.
            ignore_result=True,
            # The header repr of an id list is what Celery's saferepr would build.
            argsrepr=repr(args),
            kwargsrepr="{}",
            priority=place.level,
            headers=place.headers(),
            declare=[] if queue in _declared else None,
        )
    except Exception as exc:
        log.warning(
            "enqueue_failed", operation_id=str(operation_id), task=name, error=type(exc).__name__
        )
        uncounted(rt, [place])
        _declared.discard(queue)  # whatever failed, the next publish declares again
        return False
    _declared.add(queue)
    return True


# Queues this process has published a wake-up to, declaring it. Celery declares the queue
# before every publish (kombu binds a copy of the queue and its exchange to the channel,
# then finds it in its per-connection cache): 40-60 us of the 300 a poll's publish costs,
# measured, to learn what the first publish already made true. The declaration is a
# fact on the broker (the binding in Redis), not on a connection, so it holds for the
# process; if the broker lost it (Redis restarted empty), every worker's consumer declares
# its queues again as it reconnects, and the sweeper's batches (enqueue_many) declare with
# their first message, so a wake-up lost meanwhile is re-sent from next_poll_at.
_declared: set[str] = set()


# Redis commands buffered before the pipeline is sent; a sweep batch larger than this is
# sent in several round trips, each still one pipeline.
PUBLISH_PIPELINE_SIZE = 1000


def enqueue_many(
    rt: Runtime,
    due: Sequence[tuple[uuid.UUID, S]],
    owners: Mapping[uuid.UUID, Owner] | None = None,
) -> bool:
    """Publish one wake-up per (operation, state) in one connection checkout and one Redis
    pipeline (kombu's Producer.batch); False when the broker failed. ``owners``: whose
    each operation is, which places its wake-up in the broker (missing: level 0).

    The messages are the same Celery task messages ``enqueue`` sends. On a broker
    failure delivery is uncertain, so this returns False and logs; the rows stay marked
    dispatched and the sweeper re-sends them after redispatch_after_seconds (a message
    sent twice is harmless: the task re-checks the row).
    """
    wakeups = [(op_id, TASK_FOR_STATE[state]) for op_id, state in due if state in TASK_FOR_STATE]
    if not wakeups:
        return True
    known = owners or {}
    places = placed(rt, [known.get(op_id) for op_id, _ in wakeups]) if known else None
    try:
        with app.producer_or_acquire() as producer, producer.batch(max_size=PUBLISH_PIPELINE_SIZE):
            for n, (op_id, name) in enumerate(wakeups):
                place = places[n] if places is not None else FRONT
                args = [str(op_id)]
                app.send_task(
                    name,
                    args=args,
                    queue=rt.settings.queue,
                    producer=producer,
                    retry=False,
                    ignore_result=True,
                    # Inside the sweep task, each result would join its trail: 100,000 of them.
                    add_to_parent=False,
                    # Per-message costs that buy nothing here (a third of the publish time):
                    # the queue is declared by the first message, and the header repr of an
                    # id list is what Celery's saferepr would build.
                    declare=None if n == 0 else [],
                    argsrepr=repr(args),
                    kwargsrepr="{}",
                    priority=place.level,
                    headers=place.headers(),
                )
    except Exception as exc:
        log.warning("enqueue_batch_failed", wakeups=len(wakeups), error=type(exc).__name__)
        # Delivery is uncertain: the counts stay (too high at worst, until the keys expire).
        return False
    return True


# A task that finds the lease taken re-publishes itself this much later: the holder may be
# a person's intervention that does not publish the worker's wake-up again (a cancel
# refused, a decision still being typed), and the sweeper's redispatch is a minute away.
LEASE_BUSY_RETRY_SECONDS = 1.0


def republish(rt: Runtime, task_name: str, operation_id: uuid.UUID) -> bool:
    """Publish ``task_name`` again for an operation whose lease was busy."""
    try:
        app.send_task(
            task_name,
            args=[str(operation_id)],
            countdown=min(LEASE_BUSY_RETRY_SECONDS, rt.settings.max_countdown_seconds),
            queue=rt.settings.queue,
            retry=False,
            ignore_result=True,
        )
    except Exception as exc:
        log.warning("republish_failed", operation_id=str(operation_id), error=type(exc).__name__)
        return False
    return True


def schedule(
    rt: Runtime, operation_id: uuid.UUID, state: S, at: datetime | None, owner: Owner | None = None
) -> None:
    """A short wait becomes a countdown message; a long one stays parked in next_poll_at."""
    if at is None:
        return
    countdown = (at - utcnow()).total_seconds()
    if countdown <= rt.settings.max_countdown_seconds:
        enqueue(rt, operation_id, state, countdown, owner)
