"""The approval window: a human's wait never consumes the provider's deadlines, has a
bound of its own, and an approval that can no longer be kept is refused (issue 20)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from jobwarden.models.actions import Decided, Finish, NotYet, Record
from jobwarden.models.contracts.contract import Limits
from jobwarden.models.create_decisions import create_too_late
from jobwarden.models.errors import ApprovalRefusedError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.approvals import (
    BUSINESS_DEADLINE_PASSED,
    WINDOW_CLOSED,
    approval_window_end,
    decide_approval,
    decide_window,
    window_end,
)
from jobwarden.models.operation import Operation
from jobwarden.models.states import TERMINAL, OperationState
from tests.unit.factories import NOW, operation, planned, walked

S = OperationState
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


def _waiting(**overrides: object) -> Operation:
    """Submitted at NOW with create deadline 300 s, waiting for approval for a day."""
    values: dict[str, object] = {
        "authorized_by": None,
        "created_at": NOW,
        "create_deadline": NOW + timedelta(seconds=300),
        "result_deadline": NOW + timedelta(hours=2),
        "next_poll_at": NOW + DAY,
    }
    return operation(S.awaiting_approval, **{**values, **overrides})


def _approve(op: Operation, at: timedelta, *, since: timedelta = timedelta(0)) -> Decided:
    return decide_approval(
        op,
        fingerprint=op.request_fingerprint,
        approver="bo",
        now=NOW + at,
        valid_for=HOUR,
        waiting_since=NOW + since,
        window=DAY,
    )


def test_an_approval_moves_both_deadlines_by_the_wait_and_records_them() -> None:
    op = _waiting()
    decided = _approve(op, timedelta(minutes=8))
    p = planned(op, decided, now=NOW + timedelta(minutes=8))
    create_by = NOW + timedelta(minutes=8, seconds=300)
    result_by = NOW + timedelta(minutes=8, hours=2)
    assert p.changes["create_deadline"] == create_by
    assert p.changes["result_deadline"] == result_by
    (event,) = p.events
    assert event.kind is EventKind.approved and event.excerpt is not None
    assert event.excerpt["create_deadline"] == create_by.isoformat()
    assert event.excerpt["result_deadline"] == result_by.isoformat()
    assert event.excerpt["waited_seconds"] == 480.0
    # The user's story: approved 8 minutes in with a 300 s create deadline, the create
    # is still in time (before the change this said create_deadline_exceeded).
    approved = op.with_changes(p.changes)
    assert create_too_late(approved, NOW + timedelta(minutes=8, seconds=1)) is None


def test_the_wait_counts_from_when_the_operation_began_waiting_not_from_its_intent() -> None:
    # Admitted by its concurrency key 20 minutes in, its deadlines already moved by that.
    op = _waiting(create_deadline=NOW + timedelta(minutes=20, seconds=300))
    decided = _approve(op, timedelta(minutes=30), since=timedelta(minutes=20))
    p = planned(op, decided, now=NOW + timedelta(minutes=30))
    assert p.changes["create_deadline"] == NOW + timedelta(minutes=30, seconds=300)


def test_the_business_deadline_never_moves_and_caps_the_approvals_validity() -> None:
    business = NOW + timedelta(minutes=40)
    op = _waiting(business_deadline=business, next_poll_at=business)
    p = planned(op, _approve(op, timedelta(minutes=8)), now=NOW + timedelta(minutes=8))
    assert "business_deadline" not in p.changes
    assert p.changes["approval_expires_at"] == business


@pytest.mark.parametrize(
    ("overrides", "at", "reason"),
    [
        ({}, DAY, WINDOW_CLOSED),
        ({}, DAY + timedelta(seconds=1), WINDOW_CLOSED),
        # A row without a timer (written before it existed): the end is computed.
        ({"next_poll_at": None}, DAY, WINDOW_CLOSED),
        (
            {"business_deadline": NOW + HOUR, "next_poll_at": NOW + HOUR},
            HOUR,
            BUSINESS_DEADLINE_PASSED,
        ),
    ],
)
def test_a_late_approval_is_refused_naming_the_reason(
    overrides: dict[str, object], at: timedelta, reason: str
) -> None:
    with pytest.raises(ApprovalRefusedError) as refused:
        _approve(_waiting(**overrides), at)
    assert refused.value.reason == reason
    assert str(refused.value).startswith(reason)


def test_an_approval_of_an_operation_its_window_already_ended_names_the_reason() -> None:
    with pytest.raises(ApprovalRefusedError) as refused:
        _approve(operation(S.approval_expired, authorized_by=None), DAY)
    assert refused.value.reason == WINDOW_CLOSED


def test_an_approval_a_moment_before_the_window_ends_is_accepted() -> None:
    decided = _approve(_waiting(), DAY - timedelta(seconds=1))
    assert isinstance(decided.action, Record) and decided.action.to is S.create_pending


def test_the_window_end_is_capped_by_the_business_deadline() -> None:
    assert window_end(NOW, DAY, None) == NOW + DAY
    assert window_end(NOW, DAY, NOW + HOUR) == NOW + HOUR
    assert window_end(NOW, HOUR, NOW + DAY) == NOW + HOUR
    op = _waiting(next_poll_at=None, business_deadline=NOW + HOUR)
    assert approval_window_end(op, waiting_since=NOW, window=DAY) == NOW + HOUR


def test_the_contracts_approval_window_defaults_to_a_day() -> None:
    limits = Limits(
        create_deadline_seconds=300,
        result_deadline_seconds=3600,
        cancel_deadline_seconds=60,
        max_status_requests=5,
        max_transport_failures=3,
        request_timeout_seconds=10,
    )
    assert limits.approval_window_seconds == 86400


@pytest.mark.parametrize(
    ("business", "cause"),
    [
        (None, "approval window closed without an approval"),
        (NOW + HOUR, "business deadline passed while awaiting approval"),
    ],
)
def test_the_window_step_ends_the_operation_in_approval_expired_along_the_table(
    business: datetime | None, cause: str
) -> None:
    end = NOW + HOUR
    op = _waiting(next_poll_at=end, business_deadline=business)
    decided = decide_window(op, end)
    assert decided.action == Finish(state=S.approval_expired, reason=cause)
    p = planned(op, decided, now=end)
    assert walked(S.awaiting_approval, p) == [S.approval_expired]
    assert S.approval_expired in TERMINAL
    # Terminal: no timer survives it, so the sweeper never wakes it again.
    assert p.changes["next_poll_at"] is None and p.next_at is None
    assert p.events[0].cause == cause


@pytest.mark.parametrize("timer", [NOW + HOUR, None])
def test_the_window_step_writes_nothing_before_the_end_or_without_a_timer(
    timer: datetime | None,
) -> None:
    op = _waiting(next_poll_at=timer)
    decided = decide_window(op, NOW + timedelta(minutes=59))
    assert decided.action == NotYet(until=timer)
    assert planned(op, decided).empty
