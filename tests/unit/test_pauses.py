"""The planner's hold decision (models/humans/pauses.py): every state x hold x action kind.

A pause covering an operation parks any request before it is counted or sent; whatever
needs no request (a deadline passed, a stop, an early wake-up) is decided as always.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from jobwarden.models.actions import (
    Decided,
    DelaySource,
    Escalate,
    EscalationReason,
    Finish,
    NotYet,
    ProviderRequest,
    Record,
    RequestPurpose,
    Send,
    Wait,
    escalate,
)
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.holds import Hold
from jobwarden.models.humans.pauses import (
    DEFAULT_RESUME_RATE,
    RESUME_SHARE,
    SENDING,
    checked_reason,
    held,
    park,
    park_timer,
    resume_time,
    resumed,
)
from jobwarden.models.operation import Operation
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import before_cancel, before_poll
from tests.unit.factories import NOW, context, operation, planned
from tests.unit.step_helpers import cancelling_requested, polling

PAUSE = uuid.UUID(int=7)
OTHER = uuid.UUID(int=8)
HOLD = Hold(pause_id=PAUSE, author="token:alice", reason="provider incident", started_at=NOW)


def _send(purpose: RequestPurpose) -> Decided:
    request = ProviderRequest(purpose=purpose, method="GET", url="http://127.0.0.1:8765/x")
    return Decided(action=Send(request=request, event=EventKind.poll_sent))


WAIT = Decided(
    action=Wait(
        until=NOW + timedelta(seconds=30),
        delay_seconds=30,
        delay_source=DelaySource.local_backoff,
        clipped_to_deadline=False,
    )
)
STOP = Decided(action=escalate(S.observing, EscalationReason.deadline_exceeded, "late"))
END = Decided(action=Finish(state=S.failed, reason="failed"))
EARLY = Decided(action=NotYet(until=None))
ACTIONS = {
    **{f"send_{p.value}": _send(p) for p in RequestPurpose},
    "wait": WAIT,
    "escalate": STOP,
    "finish": END,
    "not_yet": EARLY,
}
# How the snapshot holds (or not): no pause; a pause that has not parked it yet; the same
# pause, already parked and not due; the same pause, parked and due (its deadline timer).
HOLDS: dict[str, dict[str, object]] = {
    "none": {},
    "unparked": {"hold": HOLD},
    "parked_not_due": {
        "hold": HOLD,
        "held_by": PAUSE,
        "next_poll_at": NOW + timedelta(minutes=5),
    },
    "parked_no_timer": {"hold": HOLD, "held_by": PAUSE, "next_poll_at": None},
    "parked_due": {"hold": HOLD, "held_by": PAUSE, "next_poll_at": NOW},
    "parked_by_another": {"hold": HOLD, "held_by": OTHER, "next_poll_at": NOW},
}


@pytest.mark.parametrize("state", list(S))
@pytest.mark.parametrize("hold", HOLDS)
def test_a_pause_parks_every_request_and_nothing_else(state: S, hold: str) -> None:
    op = operation(state, **HOLDS[hold])
    for name, decided in ACTIONS.items():
        out = held(op, decided, NOW)
        if hold == "none" or not isinstance(decided.action, Send):
            assert out is decided, name  # no request: decided as always (deadlines run)
            continue
        if hold in ("parked_not_due", "parked_no_timer"):
            assert out.action == NotYet(until=None), name  # already parked: no write again
            continue
        assert isinstance(out.action, Record) and out.action.event is EventKind.paused, name
        assert out.changes["held_by"] == PAUSE
        assert out.action.excerpt["held_back"] == decided.action.request.purpose.value
        # Parking counts nothing and moves no state; the sweeper relays its timer.
        assert set(out.changes) == {"held_by", "next_poll_at", "dispatched_at"}
        assert out.changes["dispatched_at"] is None
        p = planned(op, out)
        assert "status_requests_used" not in p.changes and "state" not in p.changes
        assert [e.kind for e in p.events] == [EventKind.paused]
        assert "token:alice" in (p.events[0].cause or "")


def test_the_parked_timer_is_the_next_deadline_so_deadlines_keep_running() -> None:
    op = polling(S.observing, result_deadline=NOW + timedelta(hours=1))
    assert park_timer(op, NOW) == NOW + timedelta(hours=1)
    soon = NOW + timedelta(minutes=3)
    assert park_timer(polling(S.observing, business_deadline=soon), NOW) == soon
    gone = polling(S.observing, result_deadline=NOW - timedelta(seconds=1))
    assert park_timer(gone, NOW) is None


def test_a_poll_past_its_deadline_while_paused_stops_without_a_request() -> None:
    op = polling(S.observing, result_deadline=NOW - timedelta(seconds=1), hold=HOLD)
    out = held(op, before_poll(op, context(), NOW), NOW)
    assert isinstance(out.action, Escalate)
    assert out.action.reason is EscalationReason.deadline_exceeded


def test_a_due_poll_while_paused_is_parked_with_no_request_counted() -> None:
    op = polling(S.observing, hold=HOLD)
    out = held(op, before_poll(op, context(), NOW), NOW)
    assert isinstance(out.action, Record) and out.action.event is EventKind.paused
    assert out.changes["next_poll_at"] == op.result_deadline


def test_a_cancel_waits_for_the_resume_unless_a_person_let_it_go_during_the_pause() -> None:
    op = cancelling_requested(hold=HOLD)
    parked = held(op, before_cancel(op, context(), NOW), NOW)
    assert isinstance(parked.action, Record) and parked.action.excerpt["held_back"] == "cancel"
    allowed = cancelling_requested(hold=HOLD, cancel_during_pause_by="token:alice")
    out = held(allowed, before_cancel(allowed, context(), NOW), NOW)
    assert isinstance(out.action, Send) and out.action.request.purpose is RequestPurpose.cancel
    # ... and the confirming status reads after it are held like any other request.
    confirming = polling(S.cancelling, hold=HOLD, cancel_during_pause_by="token:alice")
    assert isinstance(held(confirming, before_poll(confirming, context(), NOW), NOW).action, Record)


@pytest.mark.parametrize("state", list(S))
def test_a_pause_parks_only_states_that_send(state: S) -> None:
    out = park(operation(state), HOLD, NOW)
    assert (out is not None) is (state in SENDING)
    assert park(operation(state, held_by=PAUSE), HOLD, NOW) is None


def test_a_resume_wakes_what_this_pause_parked_and_nothing_else() -> None:
    at = NOW + timedelta(seconds=3)
    op = polling(S.observing, held_by=PAUSE, next_poll_at=None)
    out = resumed(op, PAUSE, at=at, resumed_by="token:bob", now=NOW)
    assert out is not None and isinstance(out.action, Record)
    assert out.action.event is EventKind.resumed
    assert out.changes == {"held_by": None, "next_poll_at": at, "dispatched_at": None}
    assert (
        resumed(polling(S.observing, held_by=OTHER), PAUSE, at=at, resumed_by="b", now=NOW) is None
    )
    # Still under another active pause: parked under that one instead of woken.
    other = Hold(pause_id=OTHER, author="token:carol", reason="tenant", started_at=NOW)
    again = resumed(
        polling(S.observing, held_by=PAUSE, hold=other), PAUSE, at=at, resumed_by="b", now=NOW
    )
    assert again is not None and again.changes["held_by"] == OTHER
    # Ended while paused (a deadline): only the mark is cleared.
    ended = resumed(
        operation(S.result_timed_out, held_by=PAUSE), PAUSE, at=at, resumed_by="b", now=NOW
    )
    assert ended is not None and ended.changes == {"held_by": None}


def test_a_resume_never_wakes_before_the_providers_retry_after() -> None:
    later = NOW + timedelta(minutes=2)
    op = polling(S.observing, held_by=PAUSE, poll_not_before=later)
    out = resumed(op, PAUSE, at=NOW, resumed_by="token:bob", now=NOW)
    assert out is not None and out.changes["next_poll_at"] == later


def test_resumed_wake_ups_are_spread_by_half_the_rate_never_a_burst() -> None:
    # Half the rate: the other half is left to the woken operations' follow-ups, which rank
    # ahead of them at the limiter (each one displaced would be a recorded refusal).
    assert RESUME_SHARE == 0.5
    times = [resume_time(i, now=NOW, rate=4.0, u=0.5) for i in range(100)]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    assert all(g == pytest.approx(0.5) for g in gaps)
    # In any one second at most half the rate (+1 at its edge) wake, whatever the draws.
    for u in (0.0, 0.999):
        starts = [resume_time(i, now=NOW, rate=4.0, u=u) for i in range(40)]
        assert max(sum(1 for t in starts if s <= t < s + timedelta(seconds=1)) for s in starts) <= 3
    assert resume_time(10, now=NOW, rate=None, u=0.0) == NOW + timedelta(
        seconds=10 / DEFAULT_RESUME_RATE
    )


@pytest.mark.parametrize("reason", ["", "   ", "x" * 501, "bad\nline"])
def test_a_pause_needs_a_reason(reason: str) -> None:
    with pytest.raises(RefusedInputError, match="reason"):
        checked_reason(reason)


def test_the_snapshot_reads_the_hold_as_the_load_query_builds_it() -> None:
    read = operation(
        S.observing,
        hold={
            "pause_id": str(PAUSE),
            "author": "token:alice",
            "reason": "r",
            "started_at": NOW.isoformat(),
        },
    )
    assert read.hold == Hold(pause_id=PAUSE, author="token:alice", reason="r", started_at=NOW)
    assert isinstance(read, Operation)


def test_a_person_resuming_may_extend_once_within_the_bounded_option() -> None:
    op = polling(S.observing, held_by=PAUSE, result_deadline=NOW + timedelta(minutes=1))
    business = NOW + timedelta(hours=9)
    op = replace(op, business_deadline=business)
    out = resumed(op, PAUSE, at=NOW, resumed_by="token:bob", now=NOW, extend=True)
    assert out is not None
    assert out.changes["result_deadline"] == NOW + timedelta(minutes=16)
    assert out.changes["max_status_requests"] == op.max_status_requests + 4
    assert out.changes["extensions_used"] == 1
    assert "business_deadline" not in out.changes  # the business's word is not ours
    assert isinstance(out.action, Record) and "new_bounds" in out.action.excerpt
    used = replace(op, extensions_used=1)
    again = resumed(used, PAUSE, at=NOW, resumed_by="token:bob", now=NOW, extend=True)
    assert again is not None and "result_deadline" not in again.changes
    plain = resumed(op, PAUSE, at=NOW, resumed_by="token:bob", now=NOW)
    assert plain is not None and "result_deadline" not in plain.changes


def test_a_person_pausing_may_extend_once_within_the_bounded_option() -> None:
    op = polling(S.observing, result_deadline=NOW + timedelta(minutes=1))
    op = replace(op, business_deadline=NOW + timedelta(hours=9))
    out = park(op, HOLD, NOW, extend=True)
    assert out is not None
    assert out.changes["result_deadline"] == NOW + timedelta(minutes=16)
    assert out.changes["max_status_requests"] == op.max_status_requests + 4
    assert out.changes["extensions_used"] == 1
    assert "business_deadline" not in out.changes  # the business's word is not ours
    # The parked timer is the next deadline as extended, not as it was.
    assert out.changes["next_poll_at"] == NOW + timedelta(minutes=16)
    assert isinstance(out.action, Record) and "new_bounds" in out.action.excerpt
    # Parked by its own step as the pause landed: the person's extension still applies, once.
    parked = replace(op, held_by=PAUSE)
    again = park(parked, HOLD, NOW, extend=True)
    assert again is not None and again.changes["extensions_used"] == 1
    assert park(replace(parked, extensions_used=1), HOLD, NOW, extend=True) is None
    assert park(parked, HOLD, NOW) is None
    plain = park(op, HOLD, NOW)
    assert plain is not None and "result_deadline" not in plain.changes
    assert plain.changes["next_poll_at"] == NOW + timedelta(minutes=1)
