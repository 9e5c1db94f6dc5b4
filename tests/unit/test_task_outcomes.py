"""What a step task answers as Flower shows it: a stop is a declared, unretried failure
naming the reason; anything else is a result naming the state."""

from __future__ import annotations

import pickle

import pytest

from jobwarden.config.celery_app import app
from jobwarden.models.states import AUTOMATION_STOPPED, TERMINAL, OperationState
from jobwarden.tasks import pipeline
from jobwarden.tasks.outcomes import AutomationStoppedError, step_answer

STEP_TASKS = (pipeline.create, pipeline.reconcile, pipeline.poll, pipeline.cancel, pipeline.collect)


@pytest.mark.parametrize("state", sorted(s.value for s in AUTOMATION_STOPPED))
def test_a_step_that_stops_automation_raises_naming_the_state_and_reason(state: str) -> None:
    with pytest.raises(AutomationStoppedError) as raised:
        step_answer("op-1", state, reason="rate_limited", detail="5 consecutive 429 answers")
    assert str(raised.value) == (
        f"operation op-1 stopped: {state} (rate_limited): 5 consecutive 429 answers"
    )


@pytest.mark.parametrize(
    "state", [*sorted(s.value for s in TERMINAL | {OperationState.observing}), None]
)
def test_any_other_step_returns_the_operation_and_its_state(state: str | None) -> None:
    assert step_answer("op-1", state, reason=None, detail=None) == {
        "operation_id": "op-1",
        "state": state,
    }


def test_the_stop_pickles_whole_so_it_crosses_celery_intact() -> None:
    stop = AutomationStoppedError("op-1", "escalated", "unknown_state", "state 'paused'")
    back = pickle.loads(pickle.dumps(stop))
    assert (back.operation_id, back.state, back.reason, back.detail) == (
        "op-1",
        "escalated",
        "unknown_state",
        "state 'paused'",
    )
    assert str(back) == str(stop)


def test_every_step_task_declares_the_stop_expected_and_nothing_retries_it() -> None:
    for task in STEP_TASKS:
        # throws: Celery reports a FAILURE without a traceback ("raised expected").
        assert task.throws == (AutomationStoppedError,), task.name
        assert not getattr(task, "autoretry_for", ()), task.name
    # A failed task's message is acknowledged, never redelivered.
    assert app.conf.task_acks_on_failure_or_timeout is True
