"""What a step task answers, as Flower shows it (issue 11 item 5).

Flower shows a task's end from Celery's task events: SUCCESS with the returned value,
or FAILURE with the exception. A step that stops automation (escalated,
result_timed_out, cancellation_unconfirmed) must not look like a plain success
there, so its task raises ``AutomationStoppedError`` — declared in the task's
``throws``, which Celery reports as a failure without a traceback and logs at INFO
("raised expected"). Nothing retries it: no task sets ``autoretry_for`` and failures
are acknowledged (task_acks_on_failure_or_timeout), so the message is not redelivered.
Every other step returns ``{"operation_id": ..., "state": ...}``: a job that ended
failed or expired says so in its result.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from jobwarden.models.errors import JobwardenError
from jobwarden.models.states import AUTOMATION_STOPPED, OperationState
from jobwarden.tasks.runtime import current
from jobwarden.tasks.steps import read


@dataclass(eq=False)
class AutomationStoppedError(JobwardenError):
    """The step stopped automation: a human must decide (the reason and detail say why).

    Its arguments are plain strings, so it pickles and crosses Celery's JSON events.
    """

    template = "operation {operation_id} stopped: {state} ({reason}): {detail}"

    operation_id: str
    state: str
    reason: str
    detail: str


def step_answer(
    operation_id: str, state: str | None, *, reason: str | None, detail: str | None
) -> dict[str, Any]:
    """The task's result for a step that left the operation in ``state``.

    Raises AutomationStoppedError when that state waits for a human.
    """
    if state is not None and OperationState(state) in AUTOMATION_STOPPED:
        raise AutomationStoppedError(operation_id, state, reason or "-", detail or "-")
    return {"operation_id": operation_id, "state": state}


def task_answer(operation_id: str, state: str | None) -> dict[str, Any]:
    """``step_answer`` for a step task, reading the stop's reason from the row.

    Only a stop costs the extra read (a snapshot): the hot path answers from ``state``.
    """
    reason = detail = None
    if state is not None and OperationState(state) in AUTOMATION_STOPPED:
        row = read(current(), uuid.UUID(operation_id))
        if row is not None:
            reason, detail = row.escalation_reason, row.escalation_detail
    return step_answer(operation_id, state, reason=reason, detail=detail)
