"""A person's "stop" is recorded at once in every state that has not ended."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.cancel_requests import decide_cancel_request
from jobwarden.models.states import TERMINAL, OperationState, is_allowed
from tests.unit.factories import NOW, operation

S = OperationState
WINDOW = timedelta(minutes=5)


def decide(state: S, **overrides: object) -> object:
    return decide_cancel_request(
        operation(state, **overrides), now=NOW, window=WINDOW, requested_by="ana", reason="stop"
    )


@pytest.mark.parametrize(
    ("state", "overrides", "to", "due"),
    [
        (S.awaiting_approval, {}, S.abandoned, False),
        (S.create_pending, {}, S.abandoned, False),
        # A 429 created nothing: still nothing to cancel remotely.
        (
            S.create_pending,
            {"create_attempts": 1, "last_event_kind": EventKind.create_rate_limited},
            S.abandoned,
            False,
        ),
        # ... as a history from before create_rate_limited recorded it.
        (
            S.create_pending,
            {"create_attempts": 1, "last_event_kind": EventKind.create_refused},
            S.abandoned,
            False,
        ),
        # The create may have left: reconcile first, then cancel the job it finds.
        (
            S.create_pending,
            {"create_attempts": 1, "last_event_kind": EventKind.create_sent},
            S.create_unknown,
            True,
        ),
        # 409 in flight: the provider is still creating it under our token.
        (
            S.create_pending,
            {"create_attempts": 2, "last_event_kind": EventKind.create_ambiguous},
            S.create_unknown,
            True,
        ),
        (S.create_unknown, {}, None, True),
        (S.reconciling, {}, None, True),
        (S.accepted, {}, S.cancel_requested, True),
        (S.observing, {}, S.cancel_requested, True),
        (S.escalated, {}, S.cancel_requested, True),
        (S.result_timed_out, {}, S.cancel_requested, True),
        (S.result_collecting, {}, None, False),
        (S.cancellation_unconfirmed, {}, None, False),
        # The job already ended; what it left is being cleaned up: recorded, not due.
        (S.cleanup_pending, {}, None, False),
        (S.cleaning_up, {}, None, False),
        (S.cleanup_unconfirmed, {}, None, False),
    ],
)
def test_each_state_records_the_cancel_and_moves_only_along_the_table(
    state: S, overrides: dict[str, object], to: S | None, due: bool
) -> None:
    move = decide(state, **overrides)
    assert move is not None
    assert (move.to, move.due) == (to, due)  # type: ignore[attr-defined]
    assert move.changes["cancel_requested_by"] == "ana"  # type: ignore[attr-defined]
    if to is not None:
        assert is_allowed(state, to)


@pytest.mark.parametrize("state", [S.cancel_requested, S.cancelling])
def test_a_cancel_already_under_way_is_not_recorded_twice(state: S) -> None:
    assert decide(state) is None


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_only_an_ended_operation_refuses_a_cancel(state: S) -> None:
    with pytest.raises(RefusedInputError, match="ended"):
        decide(state)


def test_every_state_is_covered_by_the_cancel_table() -> None:
    for state in S:
        try:
            decide(state)
        except RefusedInputError:
            assert state in TERMINAL
