"""The reserved status request: counted by the commit that decided the poll, sent by the next
poll without a claim commit of its own, recorded with its answer in one event.

DESIGN, "Cost of one poll": the reservation rides on the commit that records the current
decision; a crash leaves an unused reservation (counted), never an invisible request.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from jobwarden.models.actions import (
    Decided,
    DelaySource,
    EscalationReason,
    Finish,
    Move,
    RequestPurpose,
    Send,
    Wait,
)
from jobwarden.models.effects import plan
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.provider.rate_limits import granted
from jobwarden.models.reservations import as_sent, reserved_send, settled
from jobwarden.models.states import POLLED, OperationState
from jobwarden.models.steps import POLL, after_poll, before_cancel, before_poll
from tests.unit.factories import ACTOR, BASE, NOW, context, operation, planned, reply, walked

S = OperationState
K = EventKind
SANDBOX = context()


def polled(state: S, **overrides: Any) -> Operation:
    values: dict[str, Any] = {
        "remote_job_id": "job-1",
        "status_url": f"{BASE}/v1/jobs/job-1",
        "accepted_at": NOW - timedelta(minutes=1),
        "next_poll_at": NOW,
        "status_requests_used": 4,
        "reserved_request": 4,
        "max_status_requests": 10,
        "cancel_deadline": NOW + timedelta(minutes=5) if state is S.cancelling else None,
    }
    return operation(state, **(values | overrides))


def status_send(op: Operation) -> Send:
    send = before_poll(op, SANDBOX, NOW).action
    assert isinstance(send, Send)
    return send


def pending_answer(op: Operation, send: Send) -> Decided:
    return after_poll(as_sent(op, send), SANDBOX, send.request, reply(200, PENDING), NOW, 1.0)


PENDING = {"status": "running", "progress": 0.5}


def test_the_poll_states_are_the_states_a_reservation_is_made_in() -> None:
    assert POLL.states == POLLED


@pytest.mark.parametrize("state", sorted(POLLED))
def test_a_reserved_request_is_sent_and_recorded_with_its_answer_in_one_event(state: S) -> None:
    op = polled(state)
    spent = reserved_send(op, status_send(op))
    assert spent is not None
    assert spent.counters == {}  # counted already, by the commit that reserved it
    p = planned(op, pending_answer(op, spent), answer=reply(200, PENDING), sent=spent)
    (event,) = p.events
    assert event.kind is K.polled
    assert event.excerpt is not None
    assert (event.excerpt["request"], event.excerpt["of"]) == (4, 10)
    assert "next_poll_at" in event.excerpt and event.delay_source is not None
    # The spent reservation is replaced by the next one, on the same commit.
    assert (p.changes["status_requests_used"], p.changes["reserved_request"]) == (5, 5)
    expected = [S.observing] if state is S.accepted else []
    assert walked(state, p) == expected


def test_a_first_poll_from_accepted_moves_to_observing_on_the_answers_commit() -> None:
    op = polled(S.accepted)
    spent = reserved_send(op, status_send(op))
    assert spent is not None
    p = planned(op, pending_answer(op, spent), answer=reply(200, PENDING), sent=spent)
    assert p.changes["state"] == "observing"
    assert [(e.from_state, e.to_state) for e in p.events] == [("accepted", "observing")]


def test_a_first_poll_that_escalates_records_the_move_to_observing_on_its_observation() -> None:
    op = polled(S.accepted)
    spent = reserved_send(op, status_send(op))
    assert spent is not None
    decided = after_poll(as_sent(op, spent), SANDBOX, spent.request, reply(401), NOW, 1.0)
    p = planned(op, decided, answer=reply(401), sent=spent)
    first = p.events[0]
    assert (first.kind, first.from_state, first.to_state) == (K.observed, "accepted", "observing")
    assert first.excerpt is not None and first.excerpt["request"] == 4
    assert walked(S.accepted, p)[-1] is S.escalated
    assert p.changes["escalation_reason"] == EscalationReason.authorization_denied.value
    assert p.changes["reserved_request"] is None


def test_an_answer_event_with_a_transition_of_its_own_keeps_the_claim_before_it() -> None:
    op = polled(S.accepted)
    spent = reserved_send(op, status_send(op))
    assert spent is not None
    ending = Finish(state=S.failed, reason="refused", event=K.create_refused)
    p = planned(op, Decided(action=ending), answer=reply(400), sent=spent)
    assert [(e.kind, e.to_state) for e in p.events] == [
        (K.poll_sent, "observing"),
        (K.create_refused, "failed"),
    ]


def test_without_a_reservation_the_poll_claims_a_fresh_counted_request() -> None:
    op = polled(S.observing, reserved_request=None)
    send = status_send(op)
    assert reserved_send(op, send) is None
    assert send.counters == {"status_requests_used": 5}
    assert send.changes == {}


def test_a_reservation_perhaps_sent_is_dropped_by_a_fresh_claim_and_stays_counted() -> None:
    # The shell found the reservation already spent once (its answer was lost): it sends
    # the Send as written, which counts a fresh request and retires the old one.
    op = polled(S.observing)
    send = status_send(op)
    claim = planned(op, Decided(action=send))
    assert claim.changes["status_requests_used"] == 5
    assert claim.changes["reserved_request"] is None
    (event,) = claim.events
    assert event.kind is K.poll_sent
    assert event.cause is not None and "reserved request 4" in event.cause


def test_only_a_status_request_spends_a_reservation() -> None:
    op = polled(S.cancel_requested)
    send = before_cancel(op, SANDBOX, NOW).action
    assert isinstance(send, Send)
    assert send.request.purpose is RequestPurpose.cancel
    assert reserved_send(op, send) is None


def wait(seconds: float = 5.0) -> Wait:
    return Wait(
        until=NOW + timedelta(seconds=seconds),
        delay_seconds=seconds,
        delay_source=DelaySource.local_backoff,
        clipped_to_deadline=False,
        cause="pending",
    )


@pytest.mark.parametrize(("used", "reserved"), [(9, True), (10, False)])
def test_the_last_request_of_the_budget_is_reserved_and_none_beyond_it(
    used: int, reserved: bool
) -> None:
    op = polled(S.observing, status_requests_used=used, reserved_request=None)
    p = planned(op, Decided(action=wait()))
    assert ("reserved_request" in p.changes) is reserved
    if reserved:
        assert (p.changes["status_requests_used"], p.changes["reserved_request"]) == (10, 10)


@pytest.mark.parametrize("state", [s for s in S if s not in POLLED])
def test_no_reservation_is_made_outside_the_poll_states(state: S) -> None:
    op = polled(S.observing, reserved_request=None).with_changes({"state": state})
    p = planned(op, Decided(action=wait()))
    assert "reserved_request" not in p.changes


def test_a_plan_without_a_next_wake_up_reserves_nothing() -> None:
    op = polled(S.observing, reserved_request=None)
    p = planned(op, Decided(action=replace(status_send(op))))
    assert p.next_at is None
    assert p.changes.get("reserved_request") is None


def test_a_plan_reserves_nothing_until_the_step_settles_it() -> None:
    # plan() is the same for every writer (intake's Open too); only settling a step's plan
    # reserves the next status request (models/reservations.settled).
    op = polled(S.observing, reserved_request=None)
    unsettled = plan(
        op, Decided(action=wait()), actor=ACTOR, now=NOW, answer=None, max_countdown=60
    )
    assert "reserved_request" not in unsettled.changes and unsettled.waits
    p = settled(op, unsettled)
    assert (p.changes["status_requests_used"], p.changes["reserved_request"]) == (5, 5)
    assert p.events[-1].excerpt is not None and p.events[-1].excerpt["reserved_request"] == 5


def test_a_recorded_step_failure_reserves_nothing_even_when_settled() -> None:
    op = polled(S.observing, reserved_request=None)
    move = Move(to=S.observing, event=K.decision, cause="poll step crashed", wake_at=NOW)
    p = planned(op, Decided(action=move))
    assert "reserved_request" not in p.changes


def test_a_reserved_request_keeps_the_rate_limiters_grant_in_its_record() -> None:
    op = polled(S.observing)
    at = NOW.timestamp() + 0.25
    spent = reserved_send(op, granted(status_send(op), at))
    assert spent is not None
    assert (spent.excerpt["request"], spent.excerpt["of"]) == (4, 10)
    p = planned(op, pending_answer(op, spent), answer=reply(200, PENDING), sent=spent)
    (event,) = p.events
    assert event.excerpt is not None and "rate_limit_granted_at" in event.excerpt
