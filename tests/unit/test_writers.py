"""Writers outside a step: each decides purely and goes through ``plan()``.

A person's cancel request, approval and escalation decision, a webhook delivery and
intake's intent are decided in ``models/`` and planned by ``plan()`` like any step's
action (``Record``, ``Open``), so their events and column changes have one author.
Tables per writer, the transition walk of every plan, and the structural rule that
no module under ``jobwarden/tasks`` builds an event or a fenced write by hand.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import fields, replace
from datetime import timedelta
from pathlib import Path

import pytest

from jobwarden.models.actions import (
    Decided,
    DelaySource,
    EscalationReason,
    Open,
    Record,
    escalate,
)
from jobwarden.models.concurrency import Occupancy
from jobwarden.models.conventions.strategies import Monitor
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.approvals import decide_approval
from jobwarden.models.humans.cancel_requests import decide_cancel_request
from jobwarden.models.humans.escalation import (
    EXTEND_CHECKS,
    EscalationView,
    OptionKind,
    decide_option,
)
from jobwarden.models.intake.intent import Intake, initial_state, open_operation
from jobwarden.models.intake.submission import Submission
from jobwarden.models.operation import Operation
from jobwarden.models.states import TERMINAL, OperationState
from tests.unit.factories import ACTOR, MAX_COUNTDOWN, NOW, contract, operation, planned, walked

S = OperationState
WINDOW = timedelta(seconds=300)


# --- Record: the state and the timer change only where the action says so ----------------


def test_a_record_that_moves_and_wakes_sets_both_timer_fields_and_a_wake_up() -> None:
    op = operation(S.observing, next_poll_at=NOW + timedelta(seconds=90))
    record = Record(
        event=EventKind.cancel_requested,
        to=S.cancel_requested,
        cause="no longer needed",
        wake_at=NOW,
    )
    p = planned(op, Decided(action=record, changes={"cancel_reason": "no longer needed"}))
    assert p.changes == {
        "cancel_reason": "no longer needed",
        "state": S.cancel_requested.value,
        "next_poll_at": NOW,
        "dispatched_at": NOW,
    }
    (ev,) = p.events
    assert (ev.kind, ev.from_state, ev.to_state, ev.actor) == (
        EventKind.cancel_requested,
        S.observing.value,
        S.cancel_requested.value,
        ACTOR,
    )
    assert p.next_at == NOW
    assert walked(S.observing, p) == [S.cancel_requested]


def test_a_record_ending_the_operation_stops_its_timer_even_without_a_wake_up() -> None:
    op = operation(S.queued, next_poll_at=NOW)
    p = planned(op, Decided(action=Record(event=EventKind.cancel_requested, to=S.abandoned)))
    assert p.changes == {"state": "abandoned", "next_poll_at": None, "dispatched_at": None}
    assert p.next_at is None


def test_a_record_that_only_records_leaves_the_state_and_the_timer_alone() -> None:
    # A webhook on an operation whose poll is already due: nothing but the event.
    op = operation(S.observing, next_poll_at=NOW, reserved_request=3)
    record = Record(
        event=EventKind.webhook_received, cause="already due", excerpt={"event_id": "e"}
    )
    p = planned(op, Decided(action=record))
    assert p.changes == {}
    (ev,) = p.events
    assert (ev.from_state, ev.to_state, ev.excerpt) == (None, None, {"event_id": "e"})
    assert p.next_at is None


def test_a_record_in_the_state_it_names_is_no_transition() -> None:
    op = operation(S.observing)
    p = planned(op, Decided(action=Record(event=EventKind.webhook_received, to=S.observing)))
    assert "state" not in p.changes
    assert p.events[0].to_state is None


def test_a_record_carries_its_delay_source_and_a_long_wait_is_parked() -> None:
    later = NOW + timedelta(seconds=MAX_COUNTDOWN + 1)
    record = Record(
        event=EventKind.webhook_received,
        delay_source=DelaySource.provider_retry_after,
        wake_at=later,
    )
    p = planned(operation(S.observing), Decided(action=record))
    assert p.events[0].delay_source == "provider_retry_after"
    assert p.changes == {"next_poll_at": later, "dispatched_at": None}


def test_a_record_never_reserves_a_status_request() -> None:
    op = operation(S.observing, reserved_request=None, status_requests_used=2)
    p = planned(op, Decided(action=Record(event=EventKind.webhook_received, wake_at=NOW)))
    assert "reserved_request" not in p.changes
    assert "status_requests_used" not in p.changes


# --- the decisions behind each person's write ------------------------------------------


@pytest.mark.parametrize(
    ("state", "to", "due"),
    [
        (S.observing, S.cancel_requested, True),
        (S.queued, S.abandoned, False),
        (S.create_unknown, None, True),
        (S.result_collecting, None, False),
        (S.escalated, S.cancel_requested, True),
    ],
)
def test_a_cancel_request_is_planned_with_its_intent_and_a_wake_up_when_due(
    state: S, to: S | None, due: bool
) -> None:
    op = operation(state, remote_job_id="j1", status_url="http://x/j1")
    move = decide_cancel_request(op, now=NOW, window=WINDOW, requested_by="ann", reason="stop")
    assert move is not None
    p = planned(op, move.decided(NOW))
    assert p.changes["cancel_requested_by"] == "ann"
    assert p.changes.get("state") == (to.value if to is not None else None)
    assert (p.next_at == NOW) is due
    assert p.events[0].kind is EventKind.cancel_requested
    walked(state, p)


def test_an_approval_moves_to_create_pending_due_now_and_expires() -> None:
    op = operation(S.awaiting_approval)
    decided = decide_approval(
        op,
        fingerprint=op.request_fingerprint,
        approver="bo",
        now=NOW,
        valid_for=WINDOW,
        waiting_since=NOW,
        window=timedelta(days=1),
    )
    p = planned(op, decided)
    assert p.changes == {
        "authorized_by": "bo",
        "approval_expires_at": NOW + WINDOW,
        "create_deadline": op.create_deadline,
        "result_deadline": op.result_deadline,
        "state": S.create_pending.value,
        "next_poll_at": NOW,
        "dispatched_at": NOW,
    }
    assert p.events[0].excerpt == {
        "fingerprint": op.request_fingerprint,
        "expires_at": (NOW + WINDOW).isoformat(),
        "waited_seconds": 0.0,
        "create_deadline": op.create_deadline.isoformat(),
        "result_deadline": op.result_deadline.isoformat(),
    }
    assert walked(S.awaiting_approval, p) == [S.create_pending]


@pytest.mark.parametrize(
    ("state", "fingerprint", "problem"),
    [
        (S.create_pending, "f" * 64, "is not awaiting approval"),
        (S.awaiting_approval, "0" * 64, "a changed payload needs a new approval"),
    ],
)
def test_an_approval_is_refused_off_its_state_or_its_fingerprint(
    state: S, fingerprint: str, problem: str
) -> None:
    with pytest.raises(RefusedInputError, match=problem):
        decide_approval(
            operation(state),
            fingerprint=fingerprint,
            approver="bo",
            now=NOW,
            valid_for=WINDOW,
            waiting_since=NOW,
            window=timedelta(days=1),
        )


def _view(op: object, **overrides: object) -> EscalationView:
    values: dict[str, object] = {
        "state": S.escalated,
        "reason": EscalationReason.request_budget_exhausted,
        "has_remote_job": True,
        "contract_has_cancel": True,
        "extensions_used": 0,
    }
    return EscalationView(**{**values, **overrides})  # type: ignore[arg-type]


def test_an_extension_raises_the_bounds_records_them_and_wakes_the_poll_now() -> None:
    op = operation(
        S.escalated,
        escalation_reason=EscalationReason.request_budget_exhausted,
        escalation_detail="8 of 8",
        status_requests_used=8,
        max_status_requests=8,
        remote_job_id="j1",
        status_url="http://x/j1",
    )
    p = planned(
        op,
        decide_option(op, _view(op), OptionKind.extend, note="ok", now=NOW, cancel_window=WINDOW),
    )
    assert p.changes["state"] == S.observing.value
    assert p.changes["max_status_requests"] == 8 + EXTEND_CHECKS
    assert "status_requests_used" not in p.changes  # raised, never reset
    assert (p.changes["next_poll_at"], p.changes["dispatched_at"]) == (NOW, NOW)
    excerpt = p.events[0].excerpt or {}
    assert excerpt["escalation_reason"] == "request_budget_exhausted"
    assert excerpt["new_bounds"]["max_status_requests"] == 8 + EXTEND_CHECKS
    assert p.events[0].kind is EventKind.human_decision
    walked(S.escalated, p)


def test_abandoning_ends_the_operation_and_its_timer() -> None:
    op = operation(S.escalated, escalation_reason=EscalationReason.provider_failure)
    p = planned(
        op, decide_option(op, _view(op), OptionKind.abandon, note="", now=NOW, cancel_window=WINDOW)
    )
    assert p.changes["state"] == S.abandoned.value
    assert (p.changes["next_poll_at"], p.changes["dispatched_at"]) == (None, None)
    assert S.abandoned in TERMINAL


def test_an_option_not_on_offer_is_refused() -> None:
    op = operation(S.escalated, escalation_reason=EscalationReason.authorization_denied)
    with pytest.raises(RefusedInputError, match="not offered"):
        decide_option(
            op,
            _view(op, reason=EscalationReason.authorization_denied),
            OptionKind.extend,
            note="",
            now=NOW,
            cancel_window=WINDOW,
        )


# --- intake's intent ---------------------------------------------------------------------


def _submission(**overrides: object) -> Submission:
    values: dict[str, object] = {
        "tenant": "t",
        "provider": "sandbox",
        "idempotency_key": "k",
        "command": {"report": "monthly"},
        "requested_by": "svc",
        "source_event_id": None,
        "method": "POST",
        "route": "/providers/sandbox/operations",
        "max_status_requests": None,
        "result_deadline_seconds": None,
        "max_transport_failures": None,
        "cancel_deadline_seconds": None,
    }
    return Submission(**{**values, **overrides})  # type: ignore[arg-type]


def _intake(**facts: object) -> Intake:
    values: dict[str, object] = {
        "operation_id": uuid.UUID(int=7),
        "fingerprint": "f" * 64,
        "trace_id": "a" * 32,
        "actor": "submitter:svc",
    }
    return Intake(**{**values, **facts})  # type: ignore[arg-type]


FULL = Occupancy(holders=1, queued=0)  # a key admitting one at a time, held
ROOM = Occupancy(holders=0, queued=0)
WAITED = Occupancy(holders=0, queued=1)  # room, but somebody queued first


@pytest.mark.parametrize(
    ("approval", "occupancy", "state"),
    [
        (False, None, S.create_pending),
        (True, None, S.awaiting_approval),
        (False, ROOM, S.create_pending),
        (True, ROOM, S.awaiting_approval),
        (False, FULL, S.queued),
        (False, WAITED, S.queued),
        # Its turn comes first; the approval is asked for when it is admitted.
        (True, FULL, S.queued),
    ],
)
def test_the_core_decides_the_state_an_operation_opens_in(
    approval: bool, occupancy: Occupancy | None, state: S
) -> None:
    terms = replace(contract(), requires_approval=approval)
    assert initial_state(terms, occupancy) is state
    sub = _submission(concurrency_key=None if occupancy is None else "env")
    op, p = open_operation(sub, terms, occupancy, NOW, intake=_intake())
    assert op.state is state
    assert p.events[0].to_state == state.value


@pytest.mark.parametrize(("state", "due"), [(S.create_pending, NOW), (S.queued, None)])
def test_the_opened_operation_is_due_only_when_its_create_may_go(state: S, due: object) -> None:
    op, _ = open_operation(
        _submission(concurrency_key="env"),
        contract(),
        FULL if state is S.queued else ROOM,
        NOW,
        intake=_intake(),
    )
    assert (op.next_poll_at, op.dispatched_at) == (due, due)
    assert op.state is state
    assert op.create_deadline == NOW + timedelta(seconds=contract().limits.create_deadline_seconds)
    assert op.max_status_requests == contract().limits.max_status_requests


@pytest.mark.parametrize(
    ("business", "end"),
    [(None, NOW + timedelta(days=1)), (600.0, NOW + timedelta(seconds=600))],
)
def test_an_operation_opened_to_await_approval_is_due_when_its_window_ends(
    business: float | None, end: object
) -> None:
    terms = replace(contract(), requires_approval=True)
    op, _ = open_operation(
        _submission(business_deadline=business), terms, None, NOW, intake=_intake()
    )
    assert op.state is S.awaiting_approval
    # Parked for the sweeper: the window's end, capped by the business deadline.
    assert (op.next_poll_at, op.dispatched_at) == (end, None)


def test_the_intent_event_opens_the_chain_into_the_operations_first_state() -> None:
    op, p = open_operation(
        _submission(business_deadline=600.0, concurrency_key="env"),
        contract(),
        FULL,
        NOW,
        intake=_intake(),
    )
    assert p.changes == {}
    (ev,) = p.events
    assert (ev.kind, ev.from_state, ev.to_state, ev.actor, ev.at) == (
        EventKind.intent_recorded,
        None,
        S.queued.value,
        "submitter:svc",
        NOW,
    )
    assert ev.cause == "queued behind the holders of its concurrency key"
    assert ev.excerpt == {
        "fingerprint": "f" * 64,
        "idempotency_key": "k",
        "source_event_id": None,
        "concurrency_key": "env",
        "business_deadline": (NOW + timedelta(seconds=600)).isoformat(),
    }
    # The chain head is the genesis until the insert chains the event with the row.
    assert (op.event_count, op.version) == (0, 1)


def test_the_intent_event_carries_the_trace_and_the_callers_marks() -> None:
    facts = _intake(traceparent="00-t-s-01", on_behalf_of="token:ann", break_glass="outage")
    _, p = open_operation(_submission(), contract(), None, NOW, intake=facts)
    excerpt = p.events[0].excerpt or {}
    assert {k: excerpt[k] for k in ("traceparent", "on_behalf_of", "principal", "break_glass")} == {
        "traceparent": "00-t-s-01",
        "on_behalf_of": "token:ann",
        "principal": "break-glass",
        "break_glass": "outage",
    }
    _, plain = open_operation(_submission(), contract(), None, NOW, intake=_intake())
    assert not {"traceparent", "on_behalf_of", "principal"} & set(plain.events[0].excerpt or {})


def test_open_is_planned_without_row_changes() -> None:
    p = planned(operation(S.create_pending), Decided(action=Open(excerpt={"a": 1})))
    assert p.changes == {}
    assert p.events[0].to_state == S.create_pending.value


# --- the structural rule -----------------------------------------------------------------

TASKS = Path(__file__).resolve().parents[2] / "jobwarden" / "tasks"


def test_no_task_module_builds_an_event_or_a_fenced_write_by_hand() -> None:
    # Events come from plan(); rows are written by store.write (a Plan), never by
    # fenced_update with hand-built changes.
    found = [
        f"{path.name}:{n}"
        for path in sorted(TASKS.glob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bEventDraft\(|\bfenced_update\(", line)
    ]
    assert found == []


def test_the_snapshot_holds_the_escalation_reason_typed() -> None:
    # Stored as text; read back (and written by a plan) as the closed set of reasons.
    stopped = operation(S.escalated).with_changes(
        {"escalation_reason": EscalationReason.rate_limited}
    )
    assert stopped.escalation_reason is EscalationReason.rate_limited
    p = planned(
        operation(S.observing),
        Decided(action=escalate(S.observing, EscalationReason.unknown_state, "x")),
    )
    after = operation(S.observing).with_changes(p.changes)
    assert after.escalation_reason is EscalationReason.unknown_state


def test_a_row_read_back_holds_its_state_reason_ending_and_polling_mode_as_enums() -> None:
    # The columns hold text; the snapshot a read builds holds the closed sets, so the code
    # after a read compares members (``is``), never spellings.
    typed = operation(S.escalated)
    row = {f.name: getattr(typed, f.name) for f in fields(typed)} | {
        "state": "cleanup_pending",
        "escalation_reason": "rate_limited",
        "ended_as": "failed",
        "polling_mode": "location",
        "last_event_kind": "escalated",
    }
    read = Operation.from_mapping(row)
    assert read.state is S.cleanup_pending
    assert read.escalation_reason is EscalationReason.rate_limited
    assert read.ended_as is S.failed
    assert read.polling_mode is Monitor.location
    assert read.last_event_kind is EventKind.escalated
    unset = Operation.from_mapping(row | {"ended_as": None, "polling_mode": None})
    assert (unset.ended_as, unset.polling_mode) == (None, None)
