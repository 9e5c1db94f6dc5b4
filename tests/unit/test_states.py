"""The transition table, checked for every ordered pair of states."""

from __future__ import annotations

import itertools

import pytest

from jobwarden.models.errors import TransitionRefusedError
from jobwarden.models.states import (
    AFTER_END,
    AUTOMATION_STOPPED,
    TERMINAL,
    TRANSITIONS,
    OperationState,
    check_transition,
)

S = OperationState

# DESIGN.md's diagram, written out by hand so the table cannot drift from it unseen.
EXPECTED: set[tuple[S, S]] = {
    # A queued operation is admitted as a fresh submission would start, or a person ends it.
    (S.queued, S.create_pending),
    (S.queued, S.awaiting_approval),
    (S.queued, S.abandoned),
    (S.awaiting_approval, S.create_pending),
    (S.awaiting_approval, S.abandoned),
    (S.awaiting_approval, S.approval_expired),  # the approval window closed unapproved
    # After the end, a person's business decision only: a result accepted as it is.
    (S.result_validation_failed, S.result_accepted),
    (S.create_pending, S.accepted),
    (S.create_pending, S.create_unknown),
    (S.create_pending, S.failed),
    (S.create_pending, S.escalated),
    (S.create_pending, S.abandoned),  # a cancel before the create was sent
    # The create about to leave is not the one approved (approval_stale): a new approval.
    (S.create_pending, S.awaiting_approval),
    (S.create_unknown, S.reconciling),
    (S.reconciling, S.accepted),
    (S.reconciling, S.failed),
    (S.reconciling, S.escalated),
    (S.accepted, S.observing),
    (S.accepted, S.cancel_requested),
    (S.observing, S.result_collecting),
    (S.observing, S.failed),
    (S.observing, S.expired),
    (S.observing, S.escalated),
    (S.observing, S.result_timed_out),
    (S.observing, S.cancel_requested),
    (S.observing, S.cancelled),
    (S.cancel_requested, S.cancelling),
    (S.cancelling, S.cancelled),
    (S.cancelling, S.result_collecting),
    (S.cancelling, S.failed),
    (S.cancelling, S.expired),
    (S.cancelling, S.cancellation_unconfirmed),
    (S.result_collecting, S.succeeded),
    (S.result_collecting, S.result_unavailable),
    (S.result_collecting, S.result_validation_failed),
    (S.result_collecting, S.escalated),
    # A signed result URL expired unfetched: a status read gives a fresh one (issue 21).
    (S.result_collecting, S.observing),
    # Partial output of a job that did not succeed, collected; it ends as it ended.
    (S.result_collecting, S.cancelled),
    (S.result_collecting, S.failed),
    (S.result_collecting, S.expired),
    (S.escalated, S.observing),
    (S.escalated, S.cancel_requested),
    (S.escalated, S.abandoned),
    (S.result_timed_out, S.observing),
    (S.result_timed_out, S.cancel_requested),
    (S.result_timed_out, S.abandoned),
    (S.cancellation_unconfirmed, S.cancelling),
    (S.cancellation_unconfirmed, S.abandoned),
    # A job that ended leaving resources ([cleanup], issue 21): it cleans up first, and
    # ends as it ended only once the provider confirmed the cleanup.
    (S.observing, S.cleanup_pending),
    (S.cancelling, S.cleanup_pending),
    (S.result_collecting, S.cleanup_pending),
    (S.cleanup_pending, S.cleaning_up),
    (S.cleanup_pending, S.cleanup_unconfirmed),
    (S.cleaning_up, S.failed),
    (S.cleaning_up, S.cancelled),
    (S.cleaning_up, S.expired),
    (S.cleaning_up, S.cleanup_unconfirmed),
    (S.cleanup_unconfirmed, S.cleaning_up),
    (S.cleanup_unconfirmed, S.cleanup_pending),
    (S.cleanup_unconfirmed, S.abandoned),
}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(S, S)))
def test_every_pair_is_allowed_exactly_when_the_table_says_so(src: S, dst: S) -> None:
    if (src, dst) in EXPECTED:
        check_transition(src, dst)
    else:
        with pytest.raises(TransitionRefusedError) as refused:
            check_transition(src, dst)
        assert refused.value.reason
        assert src.value in str(refused.value) and dst.value in str(refused.value)


def test_the_table_is_exactly_the_designed_one() -> None:
    actual = {(s, d) for s, nxt in TRANSITIONS.items() for d in nxt}
    assert actual == EXPECTED


def test_terminal_states_are_the_designed_ones_and_lead_nowhere() -> None:
    assert {
        S.succeeded,
        S.failed,
        S.cancelled,
        S.expired,
        S.result_unavailable,
        S.result_validation_failed,
        S.abandoned,
        S.approval_expired,
        S.result_accepted,
    } == TERMINAL
    # An ended state leads only where a person's decision after the end may take it.
    assert all(TRANSITIONS[s] == AFTER_END.get(s, frozenset()) for s in TERMINAL)
    assert {S.result_validation_failed: {S.result_accepted}} == AFTER_END


def test_a_result_accepted_by_a_person_is_never_entered_but_from_a_failed_validation() -> None:
    assert {s for s, nxt in TRANSITIONS.items() if S.result_accepted in nxt} == {
        S.result_validation_failed
    }
    assert S.succeeded not in TRANSITIONS[S.result_validation_failed]


def test_succeeded_is_reachable_only_through_result_collection() -> None:
    assert {s for s, nxt in TRANSITIONS.items() if S.succeeded in nxt} == {S.result_collecting}


def test_cancelled_is_never_entered_from_a_local_request_alone() -> None:
    assert S.cancelled not in TRANSITIONS[S.cancel_requested]


def test_stopped_states_leave_only_by_human_decision_targets() -> None:
    for state in AUTOMATION_STOPPED:
        assert TRANSITIONS[state] <= {
            S.observing,
            S.cancel_requested,
            S.cancelling,
            S.abandoned,
            # a person's recheck_cleanup and retry_cleanup
            S.cleaning_up,
            S.cleanup_pending,
        }


def test_a_cleanup_ends_only_as_a_job_that_left_resources_can_end() -> None:
    # Never succeeded: a cleanup follows a failure, a cancel or an expiry, and a
    # cleanup's end is how the job ended, or a person's.
    assert TRANSITIONS[S.cleaning_up] - {S.cleanup_unconfirmed} == {
        S.failed,
        S.cancelled,
        S.expired,
    }
    assert {s for s, nxt in TRANSITIONS.items() if S.cleanup_pending in nxt} == {
        S.observing,
        S.cancelling,
        S.result_collecting,
        S.cleanup_unconfirmed,
    }
