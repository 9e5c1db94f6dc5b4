"""The Celery tasks. Each carries only an operation id: it takes the lease,
reloads the row, acts if the row says so, and schedules the next wake-up
after its commit. A duplicated, late or lost message changes nothing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from celery import Task
from sqlalchemy.exc import DBAPIError

from jobwarden.config.celery_app import app
from jobwarden.models.actions import EscalationReason
from jobwarden.models.errors import (
    GiveUpError,
    LostRaceError,
    StaleVersionError,
)
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import snapshot, step_session, transaction
from jobwarden.models.states import AUTOMATION_STOPPED
from jobwarden.models.steps import (
    APPROVAL_WINDOW,
    CANCEL,
    CLEANUP,
    COLLECT,
    CREATE,
    POLL,
    RECONCILE,
    StepKind,
)
from jobwarden.observability import telemetry
from jobwarden.observability.logs import bind, bound, get_logger
from jobwarden.tasks import faults
from jobwarden.tasks.concurrency import admit_stranded, after_end
from jobwarden.tasks.dispatch import enqueue_many, republish, schedule
from jobwarden.tasks.follow_ups import follow_up_from_message, start_automatic
from jobwarden.tasks.humans import breakers
from jobwarden.tasks.humans.breakers import probe_due
from jobwarden.tasks.intake import submit_from_message
from jobwarden.tasks.leases import step_lease
from jobwarden.tasks.outcomes import AutomationStoppedError, task_answer
from jobwarden.tasks.provider.wakeup_backlog import HEADER as BACKLOG_HEADER
from jobwarden.tasks.provider.wakeup_backlog import Owner, owner_of, started
from jobwarden.tasks.reservations import marker_ttl
from jobwarden.tasks.runtime import Runtime, current, utcnow
from jobwarden.tasks.steps import record_step_failure, run, stop_automation

log = get_logger("jobwarden.tasks")


def run_step(operation_id: str, step: StepKind) -> str | None:
    """Lease, reload, act, release, then publish the next wake-up. Returns the new state."""
    # Every line the step logs names the operation, and its trace id once the row is read.
    with bound(operation_id=operation_id, step=step.name, trace_id=None):
        return _run_step(operation_id, step)


def _run_step(operation_id: str, step: StepKind) -> str | None:
    rt = current()
    op_id = uuid.UUID(operation_id)
    try:
        with (
            step_lease(
                rt.redis,
                rt.settings.key_prefix,
                op_id,
                rt.settings.lease_ttl_seconds,
                marker_ttl(rt),
            ) as reservation,
            step_session(rt.settings.database_url) as session,
        ):
            op = store.load(session, op_id)
            if op is None or op.state not in step.states:
                return op.state.value if op else None
            bind(trace_id=op.trace_id)
            faults.fault_point(rt.redis, rt.settings.key_prefix, "after_lease", op.idempotency_key)
            from_state = op.state
            with telemetry.step_span(
                step.name, op.operation_id, op.trace_id, _recorded_context(rt, op.operation_id)
            ):
                op, next_at = run(rt, op, step, session, reservation)
            # One line per step, operation and trace id bound: grep either to follow a job.
            log.info(
                "step_done",
                **{"from": from_state.value, "to": op.state.value},
                next=next_at.isoformat() if next_at else None,
            )
            if op.state is not from_state:
                log_escalation(op)
    except StaleVersionError as exc:
        # The evidence a fencing test waits for: this worker's write was refused by version.
        log.info("fenced_write_refused", version=exc.expected_version)
        return None
    except LostRaceError as exc:
        # The holder may not publish this wake-up again: never lose it (the row, not this
        # message, decides whether anything is due when it comes back).
        log.info("lease_busy", detail=str(exc))
        republish(rt, f"jobwarden.{step.name}", op_id)
        return None
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            _count_failure(rt, op_id, step, exc)
            raise
        # The server dropped the connection (a restart): nothing this step wrote is in
        # doubt beyond what the row says, so it runs again on a fresh connection, uncounted.
        log.warning("database_connection_lost")
        republish(rt, f"jobwarden.{step.name}", op_id)
        return None
    except GiveUpError as exc:
        # e.g. the contract's credential is missing: retrying cannot help, a human must act.
        log.warning("give_up", error=str(exc))
        stopped = stop_automation(rt, op_id, EscalationReason.authorization_denied, str(exc))
        if stopped in AUTOMATION_STOPPED:
            # The stop's outbox row was written with it; the line names the reason too.
            log.warning("operation_escalated", reason=EscalationReason.authorization_denied.value)
        return stopped.value if stopped else None
    except Exception as exc:
        _count_failure(rt, op_id, step, exc)
        raise
    faults.fault_point(rt.redis, rt.settings.key_prefix, "before_schedule", op.idempotency_key)
    schedule(rt, op_id, op.state, next_at, owner_of(op))
    # Lease and session released: the hand-over locks the key, never the operation.
    after_end(rt, op)
    # An end a contract's rule follows up (a failed deploy's rollback): started as the rule.
    start_automatic(rt, op)
    return op.state.value


def _recorded_context(rt: Runtime, operation_id: uuid.UUID) -> Callable[[], str | None]:
    """Reads the submission's traceparent from the intent event (tracing on, once per
    operation and process: jobwarden.observability.telemetry keeps it)."""

    def load() -> str | None:
        with snapshot(rt.settings.database_url) as session:
            return store.intent_traceparent(session, operation_id)

    return load


def log_escalation(op: Operation) -> None:
    """One WARNING line when ``op`` (as just written) has stopped automation: a human
    must act, so it must stand out from the INFO lines of every poll."""
    if op.state not in AUTOMATION_STOPPED:
        return
    log.warning(
        "operation_escalated",
        reason=op.escalation_reason.value if op.escalation_reason else op.state.value,
        # What the stop says in words (the history's text, already free of secrets).
        detail=op.escalation_detail,
        state=op.state.value,
        operation_id=str(op.operation_id),
        trace_id=op.trace_id,
    )


def _count_failure(rt: Runtime, op_id: uuid.UUID, step: StepKind, exc: BaseException) -> None:
    """A bug, not a provider signal: counted on the row, so the sweeper's retries end
    after MAX_STEP_FAILURES; loud, so nobody mistakes it for progress. The message may
    hold provider bytes, so only the class name reaches the history."""
    log.error("step_failed", error=type(exc).__name__)
    try:
        reached = record_step_failure(rt, op_id, step, exc)
    except Exception as counting:  # the database may be what failed: the sweeper retries
        log.error("step_failure_not_counted", error=str(counting))
    else:
        log.error("step_failure_counted", state=reached.value if reached else None)


class JobwardenTask(Task):  # type: ignore[misc]
    acks_late = True
    reject_on_worker_lost = True
    # A stop is a failure in Flower, not a plain success (jobwarden.tasks.outcomes); as an
    # expected error it is logged without a traceback and, like every failure, not retried.
    throws = (AutomationStoppedError,)

    def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
        # Before anything can end the task (a busy lease, a gone row): a wake-up counted in
        # its tenant's backlog is uncounted once it starts (tasks/provider/wakeup_backlog.py).
        counter = getattr(self.request, BACKLOG_HEADER, None)
        if counter is not None:
            started(current(), counter)


@app.task(name="jobwarden.create", base=JobwardenTask)
def create(operation_id: str) -> dict[str, Any]:
    return task_answer(operation_id, run_step(operation_id, CREATE))


@app.task(name="jobwarden.reconcile", base=JobwardenTask)
def reconcile(operation_id: str) -> dict[str, Any]:
    return task_answer(operation_id, run_step(operation_id, RECONCILE))


@app.task(name="jobwarden.poll", base=JobwardenTask)
def poll(operation_id: str) -> dict[str, Any]:
    return task_answer(operation_id, run_step(operation_id, POLL))


@app.task(name="jobwarden.cancel", base=JobwardenTask)
def cancel(operation_id: str) -> dict[str, Any]:
    return task_answer(operation_id, run_step(operation_id, CANCEL))


@app.task(name="jobwarden.collect", base=JobwardenTask)
def collect(operation_id: str) -> dict[str, Any]:
    return task_answer(operation_id, run_step(operation_id, COLLECT))


@app.task(name="jobwarden.cleanup", base=JobwardenTask)
def cleanup(operation_id: str) -> dict[str, Any]:
    return task_answer(operation_id, run_step(operation_id, CLEANUP))


@app.task(name="jobwarden.approval_window", base=JobwardenTask)
def approval_window(operation_id: str) -> dict[str, Any]:
    return task_answer(operation_id, run_step(operation_id, APPROVAL_WINDOW))


def sweep_once(
    rt: Runtime,
    *,
    clock: Callable[[], datetime] = utcnow,
    timer: Callable[[], float] = time.monotonic,
    budget_seconds: float | None = None,
) -> int:
    """Enqueue every due operation whose wake-up message is overdue or never sent.

    Claims a batch (its own committed transaction), publishes it in one pipeline, and
    claims again while batches come back full, until the budget (one sweep interval by
    default) is spent; what is left waits for the next sweep. Stops early when a publish
    fails: those rows are re-sent after redispatch_after_seconds. Returns rows claimed.
    """
    budget = rt.settings.sweep_interval_seconds if budget_seconds is None else budget_seconds
    grace = timedelta(seconds=rt.settings.redispatch_after_seconds)
    limit = rt.settings.sweep_batch_size
    started = timer()
    claimed = 0
    while True:
        # Publish only after the claim commits: a message must never wake a row whose
        # dispatched_at mark could still roll back.
        with transaction(rt.settings.database_url) as session:
            due = store.claim_due(session, now=clock(), redispatch_after=grace, limit=limit)
            owners = store.wakeup_owners(session, [op_id for op_id, _ in due])
        claimed += len(due)
        sent = enqueue_many(
            rt,
            due,
            {
                op_id: Owner(provider=provider, tenant=tenant, priority=priority)
                for op_id, (provider, tenant, priority) in owners.items()
            },
        )
        if len(due) < limit or not sent or timer() - started >= budget:
            # A worker that died between a holder's end and its hand-over left a queue
            # waiting on a key with room; admitted operations are published as they move.
            admit_stranded(rt)
            # A provider breaker whose cool-down ended probes the provider half-open.
            probe_due(rt)
            if claimed:
                log.info("sweep_done", claimed=claimed, seconds=round(timer() - started, 3))
            return claimed


@app.task(name="jobwarden.sweep", base=JobwardenTask)
def sweep() -> int:
    return sweep_once(current())


@app.task(name="jobwarden.breaker_park", base=JobwardenTask)
def breaker_park(provider: str) -> int:
    """Park every operation an opened provider breaker's pause covers."""
    return breakers.park_all(current(), provider)


@app.task(name="jobwarden.breaker_probed", base=JobwardenTask)
def breaker_probed(provider: str, operation_id: str, ok: bool) -> str:
    """A half-open probe's answer: close the breaker and resume, or re-arm the cool-down."""
    return breakers.probed(current(), provider, uuid.UUID(operation_id), ok)


@app.task(name="jobwarden.follow_up", base=JobwardenTask, ignore_result=False)
def follow_up(**kwargs: Any) -> dict[str, Any]:
    """Start a follow-up operation (tasks/follow_ups.py) for a service with a Celery client:
    parent_id, kind, command, requested_by and, for a kind that may be many, instruction_id.
    A refusal answers {"outcome": "invalid", "error": ...} naming what to fix."""
    return follow_up_from_message(kwargs)


@app.task(name="jobwarden.submit", base=JobwardenTask, ignore_result=False)
def submit(**kwargs: Any) -> dict[str, Any]:
    """The intake for services that only have a Celery client; the answer is the task result.

    Invalid input answers {"outcome": "invalid", "error": ...} rather than raising, so the
    caller gets a clear reason and nothing is recorded.
    """
    return submit_from_message(kwargs)
