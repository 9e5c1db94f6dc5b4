"""The business deadline: its intake rule, and how it bounds every step and wait."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.actions import Escalate, EscalationReason, Finish, Send, Wait
from jobwarden.models.contracts.contract import RemoteStatus
from jobwarden.models.errors import InvalidSubmissionError
from jobwarden.models.history.hash_form import canonical
from jobwarden.models.history.row_facts import LATER_FACTS, ROW_FACTS, _fact, row_digest
from jobwarden.models.humans.escalation import EscalationView, OptionKind, options_for
from jobwarden.models.polling.backoff import PollHint, RetryAfter
from jobwarden.models.polling.business_deadline import check_business_deadline, earlier, resolve
from jobwarden.models.polling.decisions import (
    decide_after_status,
    guard_before_status_request,
    poll_view,
)
from jobwarden.models.provider.signals import HttpSignal, SignalKind, StatusReading
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import before_create, before_poll, before_reconcile
from tests.unit.factories import NOW, context, operation

SANDBOX = context()
JOB = {"remote_job_id": "job_1", "status_url": "http://127.0.0.1:8765/v1/jobs/job_1"}


def observing(**changes: Any) -> Any:
    return operation(S.observing, accepted_at=NOW - timedelta(minutes=1), **JOB, **changes)


# --- the intake rule ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given_value", "expected"),
    [
        (None, None),
        (600, 600.0),
        (0.5, 0.5),
        ("2026-12-01T09:00:00Z", datetime(2026, 12, 1, 9, tzinfo=UTC)),
        (
            "2026-12-01T10:00:00+01:00",
            datetime(2026, 12, 1, 10, tzinfo=timezone(timedelta(hours=1))),
        ),
        (datetime(2020, 1, 1, tzinfo=UTC), datetime(2020, 1, 1, tzinfo=UTC)),  # past: allowed
    ],
)
def test_a_business_deadline_is_a_time_with_its_offset_or_seconds_from_now(
    given_value: object, expected: object
) -> None:
    assert check_business_deadline(given_value) == expected


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (0, "must be positive"),
        (-5, "must be positive"),
        (float("inf"), "must be finite"),
        (float("nan"), "must be finite"),
        (31 * 24 * 3600, "at most 2592000 seconds"),
        (True, "a time or a number of seconds"),
        ("tomorrow", "ISO 8601"),
        ("2026-12-01T09:00:00", "UTC offset"),
        (datetime(2026, 12, 1, 9), "UTC offset"),  # a naive time: refused
        ([600], "got list"),
        ("9999-12-31T23:59:59-01:00", "out of range"),
        ("0001-01-01T00:00:00+01:00", "out of range"),
    ],
)
def test_a_bad_business_deadline_is_refused_naming_the_field(bad: object, problem: str) -> None:
    with pytest.raises(InvalidSubmissionError) as caught:
        check_business_deadline(bad)
    assert "business_deadline" in str(caught.value)
    assert problem in str(caught.value)


def test_seconds_count_from_the_intake_s_now_and_a_time_is_kept_as_given() -> None:
    at = datetime(2026, 12, 1, 9, tzinfo=UTC)
    assert resolve(90.0, NOW) == NOW + timedelta(seconds=90)
    assert resolve(at, NOW) == at
    assert resolve(None, NOW) is None


# --- observing: every wait within the earlier deadline --------------------------------------


def test_the_poll_deadline_is_the_business_deadline_when_it_comes_first() -> None:
    business = NOW + timedelta(minutes=5)
    view = poll_view(observing(business_deadline=business))
    assert (view.deadline, view.deadline_is_business) == (business, True)
    later = poll_view(observing(business_deadline=NOW + timedelta(days=2)))
    assert (later.deadline, later.deadline_is_business) == (later.deadline, False)
    assert later.deadline == observing().result_deadline


def test_a_passed_business_deadline_stops_polling_while_the_result_deadline_is_far() -> None:
    op = observing(business_deadline=NOW - timedelta(seconds=1))
    assert op.result_deadline > NOW + timedelta(minutes=30)
    stop = before_poll(op, SANDBOX, NOW).action
    assert isinstance(stop, Escalate)
    assert stop.reason is EscalationReason.deadline_exceeded
    assert stop.detail == "business deadline passed"
    assert stop.state is S.result_timed_out  # keeps what is needed to look again


def test_a_cancel_s_confirmation_is_not_bounded_by_the_business_deadline() -> None:
    op = operation(
        S.cancelling,
        **JOB,
        cancel_deadline=NOW + timedelta(minutes=5),
        business_deadline=NOW - timedelta(hours=1),
    )
    view = poll_view(op)
    assert view.deadline == op.cancel_deadline
    assert guard_before_status_request(view, now=NOW) is None


def _pending(hint: float | None) -> StatusReading:
    return StatusReading(
        remote_status=RemoteStatus.pending,
        raw_state="running",
        progress=None,
        poll_hint=PollHint(seconds=hint, problem=None),
        expires_at=None,
        result_ref=None,
        error=None,
        contradiction=None,
    )


@given(
    business_in=st.floats(min_value=0.001, max_value=7200),
    retry_after=st.one_of(st.none(), st.floats(min_value=0, max_value=1e9)),
    hint=st.one_of(st.none(), st.floats(min_value=0, max_value=1e6)),
    attempt=st.integers(min_value=0, max_value=60),
    u=st.floats(min_value=0, max_value=1),
)
def test_no_wait_after_a_status_answer_passes_either_deadline(
    business_in: float, retry_after: float | None, hint: float | None, attempt: int, u: float
) -> None:
    op = observing(business_deadline=NOW + timedelta(seconds=business_in), poll_attempt=attempt)
    sig = HttpSignal(
        kind=SignalKind.ok,
        status_code=200,
        retry_after=RetryAfter(seconds=retry_after, problem=None),
        location=None,
        transport_failure=None,
    )
    decision = decide_after_status(
        poll_view(op), SANDBOX.contract.poll, sig, _pending(hint), now=NOW, u=u,
        not_found_allowed=False,
    )  # fmt: skip
    wait = decision.action
    assert isinstance(wait, Wait)
    assert wait.until <= earlier(op.result_deadline, op.business_deadline)


# --- the create path --------------------------------------------------------------------------


def test_no_create_leaves_after_the_business_deadline() -> None:
    op = operation(S.create_pending, business_deadline=NOW - timedelta(seconds=1))
    ended = before_create(op, SANDBOX, NOW).action
    assert isinstance(ended, Finish)
    assert ended.state is S.failed
    assert ended.reason.startswith("business_deadline_exceeded")


def test_a_create_is_bounded_by_the_business_deadline_when_it_comes_first() -> None:
    business = NOW + timedelta(seconds=30)
    send = before_create(operation(business_deadline=business), SANDBOX, NOW).action
    assert isinstance(send, Send)
    assert send.deadline == business
    plain = before_create(operation(), SANDBOX, NOW).action
    assert isinstance(plain, Send)
    assert plain.deadline == operation().create_deadline


def test_reconciliation_stops_at_the_business_deadline_rather_than_create_again() -> None:
    op = operation(S.create_unknown, business_deadline=NOW - timedelta(seconds=1))
    stop = before_reconcile(op, SANDBOX, NOW).action
    assert isinstance(stop, Escalate)
    assert stop.reason is EscalationReason.deadline_exceeded
    assert stop.detail == "business deadline passed while reconciling"


# --- what a human may still do --------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (S.result_timed_out, EscalationReason.deadline_exceeded),
        (S.escalated, EscalationReason.request_budget_exhausted),
        (S.escalated, EscalationReason.rate_limited),
    ],
)
def test_past_the_business_deadline_only_cancel_and_abandon_are_offered(
    state: S, reason: EscalationReason
) -> None:
    def offered(passed: bool) -> list[OptionKind]:
        view = EscalationView(
            state=state,
            reason=reason,
            has_remote_job=True,
            contract_has_cancel=True,
            extensions_used=0,
            business_deadline_passed=passed,
        )
        return [o.kind for o in options_for(view)]

    assert offered(True) == [OptionKind.cancel_at_provider, OptionKind.abandon]
    assert {OptionKind.extend, OptionKind.resume} & set(offered(False))


# --- the history binds it ---------------------------------------------------------------------


def test_a_row_without_a_business_deadline_digests_as_before_the_column_existed() -> None:
    op = operation()
    facts = {name: getattr(op, name) for name in ROW_FACTS}
    # The digest as computed before 0012 (and the other later columns): the same facts
    # without the keys of those that are unset.
    unset = {n for n in LATER_FACTS if facts[n] is None}
    assert "business_deadline" in unset
    before = {
        ("authorised_by" if n == "authorized_by" else n): _fact(ROW_FACTS[n], v)
        for n, v in facts.items()
        if n not in unset
    }
    old = hashlib.sha256(canonical(before)).hexdigest()
    assert row_digest(facts) == old
    assert row_digest({**facts, "business_deadline": NOW}) != old
