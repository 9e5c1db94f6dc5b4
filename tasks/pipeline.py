"""The Celery tasks. Each carries only an operation id: it takes the lease,
reloads the row, acts if the row says so, and schedules the next wake-up
after its commit. A duplicated, late or lost message changes nothing."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from celery import Task

from jobwarden.config.celery_app import app
from jobwarden.models import store
from jobwarden.models.db import transaction
from jobwarden.models.decisions import EscalationReason
from jobwarden.models.errors import (
    GiveUpError,
    LostRaceError,
    RefusedInputError,
    StaleVersionError,
)
from jobwarden.models.states import OperationState as S
from jobwarden.models.tables import OperationRow
from jobwarden.tasks import faults
from jobwarden.tasks.cancel_steps import cancel_step
from jobwarden.tasks.collect_steps import collect_step
from jobwarden.tasks.create_steps import create_step
from jobwarden.tasks.leases import operation_lease
from jobwarden.tasks.observe_steps import poll_step
from jobwarden.tasks.reconcile_steps import reconcile_step
from jobwarden.tasks.recording import Next, read, stop_automation
from jobwarden.tasks.runtime import Runtime, current, utcnow

log = logging.getLogger("jobwarden.tasks")

TASK_FOR_STATE: dict[str, str] = {
    S.create_pending.value: "jobwarden.create",
    S.create_unknown.value: "jobwarden.reconcile",
    S.reconciling.value: "jobwarden.reconcile",
    S.accepted.value: "jobwarden.poll",
    S.observing.value: "jobwarden.poll",
    S.cancelling.value: "jobwarden.poll",
    S.cancel_requested.value: "jobwarden.cancel",
    S.result_collecting.value: "jobwarden.collect",
}

Step = Callable[[Runtime, OperationRow], Next]


def enqueue(rt: Runtime, operation_id: uuid.UUID, state: str, countdown: float = 0.0) -> bool:
    """Publish a wake-up; on broker failure the sweeper re-sends it later (returns False)."""
    name = TASK_FOR_STATE.get(state)
    if name is None:
        return False
    try:
        app.send_task(
            name,
            args=[str(operation_id)],
            countdown=max(0.0, countdown) or None,
            queue=rt.settings.queue,
            retry=False,
        )
    except Exception as exc:
        log.warning(
            "enqueue_failed operation_id=%s task=%s error=%s",
            operation_id,
            name,
            type(exc).__name__,
        )
        return False
    return True


def schedule(rt: Runtime, operation_id: uuid.UUID, nxt: Next) -> None:
    if nxt.at is None:
        return
    countdown = (nxt.at - utcnow()).total_seconds()
    if countdown <= rt.settings.max_countdown_seconds:
        enqueue(rt, operation_id, nxt.state, countdown)


def run_step(operation_id: str, states: set[str], step: Step) -> str | None:
    """Lease, reload, act, release, then publish the next wake-up. Returns the new state."""
    rt = current()
    op_id = uuid.UUID(operation_id)
    try:
        with operation_lease(
            rt.redis, rt.settings.key_prefix, op_id, rt.settings.lease_ttl_seconds
        ):
            row = read(rt, op_id)
            if row is None or row.state not in states:
                return row.state if row else None
            faults.fault_point(rt.redis, rt.settings.key_prefix, "after_lease", row.idempotency_key)
            from_state = row.state
            nxt = step(rt, row)
            # One line per step, operation and trace id bound: grep either to follow a job.
            log.info(
                "step_done operation_id=%s trace_id=%s step=%s from=%s to=%s next=%s",
                operation_id,
                row.trace_id,
                step.__name__,
                from_state,
                nxt.state,
                nxt.at.isoformat() if nxt.at else "-",
            )
    except StaleVersionError as exc:
        # The evidence a fencing test waits for: this worker's write was refused by version.
        log.info(
            "fenced_write_refused operation_id=%s version=%s",
            operation_id,
            exc.expected_version,
        )
        return None
    except LostRaceError as exc:
        log.info("lease_busy operation_id=%s detail=%s", operation_id, exc)
        return None
    except GiveUpError as exc:
        # e.g. the contract's credential is missing: retrying cannot help, a human must act.
        log.warning("give_up operation_id=%s error=%s", operation_id, exc)
        return stop_automation(rt, op_id, EscalationReason.authorization_denied, str(exc))
    except Exception as exc:
        # A bug, not a provider signal: the sweeper retries the step, and the committed
        # counters bound any requests it repeats. Loud, so nobody mistakes it for progress.
        log.error(
            "step_failed operation_id=%s step=%s error=%s: %s",
            operation_id,
            step.__name__,
            type(exc).__name__,
            exc,
        )
        raise
    faults.fault_point(rt.redis, rt.settings.key_prefix, "before_schedule", row.idempotency_key)
    schedule(rt, op_id, nxt)
    return nxt.state


class JobwardenTask(Task):  # type: ignore[misc]
    acks_late = True
    reject_on_worker_lost = True


@app.task(name="jobwarden.create", base=JobwardenTask)
def create(operation_id: str) -> str | None:
    return run_step(operation_id, {S.create_pending.value}, create_step)


@app.task(name="jobwarden.reconcile", base=JobwardenTask)
def reconcile(operation_id: str) -> str | None:
    return run_step(operation_id, {S.create_unknown.value, S.reconciling.value}, reconcile_step)


@app.task(name="jobwarden.poll", base=JobwardenTask)
def poll(operation_id: str) -> str | None:
    return run_step(
        operation_id, {S.accepted.value, S.observing.value, S.cancelling.value}, poll_step
    )


@app.task(name="jobwarden.cancel", base=JobwardenTask)
def cancel(operation_id: str) -> str | None:
    return run_step(operation_id, {S.cancel_requested.value}, cancel_step)


@app.task(name="jobwarden.collect", base=JobwardenTask)
def collect(operation_id: str) -> str | None:
    return run_step(operation_id, {S.result_collecting.value}, collect_step)


def sweep_once(rt: Runtime) -> int:
    """Enqueue every due operation whose wake-up message is overdue or never sent."""
    now = utcnow()
    grace = timedelta(seconds=rt.settings.redispatch_after_seconds)
    with transaction(rt.settings.database_url) as session:
        due = store.claim_due(
            session, now=now, redispatch_after=grace, limit=rt.settings.sweep_batch_size
        )
    for op_id, state in due:
        enqueue(rt, op_id, state)
    return len(due)


@app.task(name="jobwarden.sweep", base=JobwardenTask)
def sweep() -> int:
    return sweep_once(current())


@app.task(name="jobwarden.submit", base=JobwardenTask, ignore_result=False)
def submit(**kwargs: Any) -> dict[str, Any]:
    """The intake for services that only have a Celery client; the answer is the task result.

    Invalid input answers {"outcome": "invalid", "error": ...} rather than raising, so the
    caller gets a clear reason and nothing is recorded.
    """
    from jobwarden.tasks.intake import submit_operation

    try:
        return submit_operation(**kwargs).as_dict()
    except (RefusedInputError, TypeError) as exc:
        return {"outcome": "invalid", "error": str(exc)}
