"""Every table keyed by state is checked against the enum: a new state that a table
forgets fails here, not in production."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from jobwarden.models.actions import STOP_VIA, EscalationReason, Record, stop_state
from jobwarden.models.humans.cancel_requests import CANCELLABLE
from jobwarden.models.humans.escalation import (
    Bounds,
    EscalationView,
    OptionKind,
    apply_option,
    decide_option,
    decide_resubmitted,
    options_for,
)
from jobwarden.models.persistence.tables import ACTIVE_STATES
from jobwarden.models.states import (
    AUTOMATION_STOPPED,
    OFFERS_OPTIONS,
    TERMINAL,
    TRANSITIONS,
    WAITING_FOR_ROOM,
    OperationState,
    is_allowed,
)
from jobwarden.models.steps import APPROVAL_WINDOW, STEPS
from jobwarden.tasks.dispatch import TASK_FOR_STATE
from tests.unit.factories import NOW, operation

S = OperationState
# awaiting_approval has a task too (the approval window's end) but no worked step: it
# sends nothing and automation never stops in it.
WORKED = frozenset(TASK_FOR_STATE) - {S.awaiting_approval}


def test_every_state_has_a_row_in_the_transition_table() -> None:
    assert set(TRANSITIONS) == set(S)


def test_every_state_is_worked_stopped_terminal_waiting_or_awaiting_a_human_exactly_once() -> None:
    groups = [WORKED, AUTOMATION_STOPPED, TERMINAL, WAITING_FOR_ROOM, {S.awaiting_approval}]
    kinds = {s: groups for s in S}
    for state, groups in kinds.items():
        assert sum(state in g for g in groups) == 1, state


def test_the_sweeper_wakes_exactly_the_states_a_task_works() -> None:
    # The due index also covers awaiting_approval, whose timer is its approval window's
    # end: the sweeper wakes the task that ends it there.
    assert set(ACTIVE_STATES) == set(TASK_FOR_STATE)
    assert TASK_FOR_STATE[S.awaiting_approval] == f"jobwarden.{APPROVAL_WINDOW.name}"
    assert APPROVAL_WINDOW.states == {S.awaiting_approval}


def test_each_worked_state_is_taken_by_exactly_the_step_its_task_runs() -> None:
    for step in STEPS:
        for state in step.states:
            assert TASK_FOR_STATE[state] == f"jobwarden.{step.name}", state
    assert set().union(*(step.states for step in STEPS)) == WORKED


@pytest.mark.parametrize("state", sorted(WORKED))
@pytest.mark.parametrize("reason", list(EscalationReason))
def test_every_worked_state_can_stop_for_every_reason_along_allowed_hops(
    state: OperationState, reason: EscalationReason
) -> None:
    target = stop_state(state, reason)
    assert target in AUTOMATION_STOPPED
    via = STOP_VIA.get(state)
    assert is_allowed(state, target) or (
        via is not None and is_allowed(state, via) and is_allowed(via, target)
    )


def test_stop_via_only_names_states_without_a_direct_stop() -> None:
    for state, via in STOP_VIA.items():
        assert state in WORKED and via in WORKED
        assert not any(is_allowed(state, stop) for stop in AUTOMATION_STOPPED)


@pytest.mark.parametrize("state", list(S))
def test_a_cancel_is_offered_only_where_the_table_allows_it(state: OperationState) -> None:
    assert (state in CANCELLABLE) == is_allowed(state, S.cancel_requested)


@pytest.mark.parametrize("state", list(S))
@pytest.mark.parametrize("reason", [None, *EscalationReason])
def test_options_exist_only_for_human_states_and_each_leads_along_the_table(
    state: OperationState, reason: EscalationReason | None
) -> None:
    view = EscalationView(
        state=state,
        reason=reason,
        has_remote_job=True,
        contract_has_cancel=True,
        extensions_used=0,
        kept_result_sha256="ab" * 32,
    )
    offered = options_for(view)
    assert bool(offered) == (state in OFFERS_OPTIONS)
    bounds = Bounds(
        result_deadline=NOW,
        max_status_requests=10,
        max_transport_failures=3,
        cancel_deadline=None,
    )
    op = operation(state, validation_summary={"kept": True, "sha256": "ab" * 32})
    for option in offered:
        if option.kind is OptionKind.resubmit:
            # The replaced operation stays where it ended; the link is its only change.
            linked = decide_resubmitted(op, new_operation=uuid.uuid4(), note="why")
            assert linked is not None and isinstance(linked.action, Record)
            assert linked.action.to is None
            continue
        if option.kind is OptionKind.accept_result:
            accepted = decide_option(
                op, view, option.kind, note="why", now=NOW, cancel_window=timedelta(minutes=5)
            )
            assert isinstance(accepted.action, Record) and accepted.action.to is not None
            assert is_allowed(state, accepted.action.to)
            continue
        changes = apply_option(
            view, option.kind, bounds, now=NOW, cancel_window=timedelta(minutes=5)
        )
        assert is_allowed(state, S(changes["state"])), option.kind


def test_every_action_of_the_closed_set_has_its_planner() -> None:
    from typing import get_args

    from jobwarden.models.actions import Action, NotYet
    from jobwarden.models.effects import _PLANNERS

    assert set(get_args(Action)) == set(_PLANNERS) | {NotYet}
