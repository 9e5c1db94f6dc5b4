"""Cleaning up what an ended job left behind (issue 21, ``[cleanup]``; models/cleanup.py).

The conventions, from their owners' public specs:
- ARM RPC "Delete Resource Asynchronously" and RPC-Delete-V1-01: a synchronous DELETE
  answers 200 or 204; a long-running one answers 202 with a Location; 204 also when the
  resource does not exist; a GET of a deleted resource answers 404.
- OpenAI Files API "Delete file": 200 ``{"id": "file-abc", "object": "file",
  "deleted": true}``.
A job that ends failed, cancelled or expired with resources left cleans up first: one
call, claimed before it leaves, then its confirmation awaited like a cancel's.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.actions import (
    Decided,
    Escalate,
    EscalationReason,
    Finish,
    NotYet,
    ProviderRequest,
    RequestPurpose,
    Send,
    Wait,
)
from jobwarden.models.cleanup import after_cleanup, before_cleanup, with_cleanup
from jobwarden.models.contracts.contract import CleanupSpec
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.escalation import (
    OptionKind,
    decide_option,
    options_for,
    view_of,
)
from jobwarden.models.operation import Operation
from jobwarden.models.provider.signals import TransportFailure
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import CLEANUP, STEPS, unsent
from tests.unit.factories import NOW, context, operation, planned, reply, walked

CTX = context("provisioning_cleanup")
_spec = CTX.contract.cleanup
assert _spec is not None
SPEC: CleanupSpec = _spec
BASE = "https://provision.example.com"
RESOURCES = f"{BASE}/v1/deployments/dep-1/resources"
CALL = ProviderRequest(purpose=RequestPurpose.cleanup, method="DELETE", url=RESOURCES)
CHECK = ProviderRequest(purpose=RequestPurpose.cleanup_check, method="GET", url=RESOURCES)


def _op(state: S, **overrides: Any) -> Operation:
    values: dict[str, Any] = {
        "provider": "provisioning_cleanup",
        "remote_job_id": "dep-1",
        "status_url": f"{BASE}/v1/deployments/dep-1",
        "status_requests_used": 5,
    }
    if state in (S.cleanup_pending, S.cleaning_up, S.cleanup_unconfirmed):
        values["ended_as"] = "failed"
    if state in (S.cleaning_up, S.cleanup_unconfirmed):
        values["cleanup_deadline"] = NOW + timedelta(minutes=10)
    return operation(state, **(values | overrides))


def _no_check() -> Any:
    return replace(CTX, contract=replace(CTX.contract, cleanup=replace(SPEC, check_path=None)))


# --- the ending deferred -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "end"),
    [
        (S.observing, S.failed),
        (S.observing, S.expired),
        (S.observing, S.cancelled),
        (S.cancelling, S.cancelled),
        (S.result_collecting, S.cancelled),
    ],
)
def test_an_ending_that_leaves_resources_goes_to_clean_up_first(state: S, end: S) -> None:
    op = _op(state)
    decided = with_cleanup(op, CTX.contract, Decided(action=Finish(state=end, reason="it ended")))
    assert isinstance(decided.action, Finish) and decided.action.clean_up
    p = planned(op, decided)
    assert walked(state, p) == [S.cleanup_pending]
    assert p.changes["ended_as"] == end.value
    # Due now: the cleanup step acts at once, and the sweeper finds it if the wake-up is lost.
    assert p.next_at == NOW and p.changes["next_poll_at"] == NOW
    assert "cleaning up" in (p.events[-1].cause or "")
    assert (p.events[-1].excerpt or {})["ended_as"] == end.value


@pytest.mark.parametrize(
    ("why", "op", "action"),
    [
        ("no [cleanup] in the contract", _op(S.observing, provider="sandbox"), None),
        (
            "no remote job: nothing exists to leave anything",
            _op(S.observing, remote_job_id=None),
            None,
        ),
        (
            "a success leaves nothing to clean",
            _op(S.result_collecting),
            Finish(state=S.result_unavailable, reason="x"),
        ),
        ("the cleanup's own end is the end", _op(S.cleaning_up), None),
        ("no edge from a create that was refused", _op(S.create_pending), None),
    ],
)
def test_an_ending_is_left_alone_when_nothing_was_left(
    why: str, op: Operation, action: Finish | None
) -> None:
    finish = action or Finish(state=S.failed, reason="it ended")
    ctx = context("sandbox") if op.provider == "sandbox" else CTX
    decided = with_cleanup(op, ctx.contract, Decided(action=finish))
    assert decided.action == finish, why


def test_only_the_ends_the_contract_names_clean_up() -> None:
    contract = replace(CTX.contract, cleanup=replace(SPEC, after=frozenset({"failed"})))
    op = _op(S.observing)
    expired = with_cleanup(op, contract, Decided(action=Finish(state=S.expired, reason="x")))
    assert isinstance(expired.action, Finish) and not expired.action.clean_up
    failed = with_cleanup(op, contract, Decided(action=Finish(state=S.failed, reason="x")))
    assert isinstance(failed.action, Finish) and failed.action.clean_up


def test_the_cleanup_step_acts_in_both_cleaning_states() -> None:
    assert CLEANUP in STEPS
    assert CLEANUP.states == {S.cleanup_pending, S.cleaning_up}


def test_every_steps_fault_points_are_known_to_the_fault_table() -> None:
    # A point the table does not know raises in the step itself: every cleanup crashed.
    from jobwarden.tasks import faults

    for step in STEPS:
        assert {step.claim_point, step.response_point} <= faults.POINTS, step.name


# --- the one call ------------------------------------------------------------------------


def test_the_call_is_claimed_in_cleaning_up_before_it_leaves() -> None:
    op = _op(S.cleanup_pending)
    action = before_cleanup(op, CTX, NOW).action
    assert isinstance(action, Send)
    assert action.request == CALL
    assert action.event is EventKind.cleanup_sent
    assert action.move_to is S.cleaning_up
    deadline = NOW + timedelta(seconds=SPEC.deadline_seconds)
    assert action.changes["cleanup_deadline"] == deadline
    p = planned(op, Decided(action=action))
    assert walked(S.cleanup_pending, p) == [S.cleaning_up]
    # A worker that dies right after the claim leaves a timer for the first check.
    assert p.changes["next_poll_at"] is not None


@given(
    used=st.integers(0, 60),
    offset=st.integers(-3600, 3600),
    early=st.booleans(),
    has_check=st.booleans(),
)
def test_once_claimed_the_call_is_never_sent_again(
    used: int, offset: int, early: bool, has_check: bool
) -> None:
    # Whatever cleaning_up holds, its step only checks: "called once" (issue 21).
    op = _op(
        S.cleaning_up,
        status_requests_used=used,
        cleanup_deadline=NOW + timedelta(seconds=offset),
        next_poll_at=NOW + timedelta(seconds=30) if early else None,
    )
    action = before_cleanup(op, CTX if has_check else _no_check(), NOW).action
    if isinstance(action, Send):
        assert action.request.purpose is RequestPurpose.cleanup_check
        assert action.request.method == "GET"
        assert action.move_to is None
    else:
        assert isinstance(action, NotYet | Escalate)


CONFIRMED = [
    # ARM: a synchronous DELETE answers 200 or 204.
    ("ARM sync 204", 204, None),
    # OpenAI Delete file: the body says it.
    ("OpenAI deleted: true", 200, {"id": "dep-1", "deleted": True}),
    # ARM: 204 also when the resource does not exist; a 404/410 means already gone.
    ("already gone 404", 404, None),
    ("already gone 410", 410, None),
]


@pytest.mark.parametrize(("why", "status", "body"), CONFIRMED)
def test_an_answer_that_confirms_ends_the_operation_as_the_job_ended(
    why: str, status: int, body: object
) -> None:
    op = _op(S.cleaning_up, ended_as="cancelled")
    decided = after_cleanup(op, CTX, CALL, reply(status, body), NOW, 0.5)
    action = decided.action
    assert isinstance(action, Finish), why
    assert (action.state, action.event) == (S.cancelled, EventKind.cleanup_confirmed)
    assert not action.clean_up
    p = planned(op, decided, answer=reply(status, body))
    assert walked(S.cleaning_up, p) == [S.cancelled]
    assert p.changes["next_poll_at"] is None


@pytest.mark.parametrize(
    ("why", "status", "body"),
    [
        ("ARM long-running: 202, confirm by checks", 202, None),
        ("OpenAI body says not deleted", 200, {"deleted": False}),
        ("1 is not true: types compared too", 200, {"deleted": 1}),
        ("no body where the pointer must read", 200, None),
        ("a refusal: the checks say what became of it", 409, {"error": "busy"}),
        ("server error", 503, None),
    ],
)
def test_an_answer_that_does_not_confirm_waits_for_a_check_and_never_calls_again(
    why: str, status: int, body: object
) -> None:
    op = _op(S.cleaning_up)
    decided = after_cleanup(op, CTX, CALL, reply(status, body), NOW, 0.5)
    assert isinstance(decided.action, Wait), why
    assert NOW < decided.action.until <= NOW + timedelta(minutes=10)
    p = planned(op, decided, answer=reply(status, body))
    assert "state" not in p.changes  # stays cleaning_up: the next step checks
    assert p.next_at == decided.action.until


def test_without_a_check_path_an_answer_that_does_not_confirm_stops_for_a_person() -> None:
    op = _op(S.cleaning_up)
    action = after_cleanup(op, _no_check(), CALL, reply(202), NOW, 0.5).action
    assert isinstance(action, Escalate)
    assert (action.state, action.reason) == (
        S.cleanup_unconfirmed,
        EscalationReason.provider_failure,
    )
    assert "without confirming" in action.detail and "ended failed" in action.detail


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_credential_stops_at_once(status: int) -> None:
    for request in (CALL, CHECK):
        action = after_cleanup(_op(S.cleaning_up), CTX, request, reply(status), NOW, 0.5).action
        assert isinstance(action, Escalate)
        assert action.reason is EscalationReason.authorization_denied
        assert action.state is S.cleanup_unconfirmed


def test_transport_failures_are_counted_and_bounded() -> None:
    lost = reply(None, failure=TransportFailure.connect_refused)
    op = _op(S.cleaning_up, transport_failures_used=1, max_transport_failures=3)
    decided = after_cleanup(op, CTX, CHECK, lost, NOW, 0.5)
    assert isinstance(decided.action, Wait)
    assert decided.changes["transport_failures_used"] == 2
    spent = replace(op, transport_failures_used=3)
    action = after_cleanup(spent, CTX, CHECK, lost, NOW, 0.5).action
    assert isinstance(action, Escalate) and action.state is S.cleanup_unconfirmed


def test_a_retry_after_cannot_stretch_the_wait_past_the_cleanup_deadline() -> None:
    op = _op(S.cleaning_up)
    hostile = reply(202, headers={"Retry-After": "999999999"})
    action = after_cleanup(op, CTX, CALL, hostile, NOW, 0.5).action
    assert isinstance(action, Wait)
    assert action.until == op.cleanup_deadline and action.clipped_to_deadline


# --- the checks --------------------------------------------------------------------------


def test_a_check_is_a_counted_get_of_the_check_path() -> None:
    op = _op(S.cleaning_up)
    action = before_cleanup(op, CTX, NOW).action
    assert isinstance(action, Send)
    assert action.request == CHECK
    assert action.event is EventKind.cleanup_check_sent
    assert action.counters == {"status_requests_used": 6}
    assert action.deadline == op.cleanup_deadline


@pytest.mark.parametrize(
    ("why", "overrides", "reason"),
    [
        ("deadline passed", {"cleanup_deadline": NOW}, EscalationReason.deadline_exceeded),
        ("budget spent", {"status_requests_used": 50}, EscalationReason.request_budget_exhausted),
    ],
)
def test_a_check_past_its_bounds_stops_for_a_person(
    why: str, overrides: dict[str, Any], reason: EscalationReason
) -> None:
    action = before_cleanup(_op(S.cleaning_up, **overrides), CTX, NOW).action
    assert isinstance(action, Escalate), why
    assert (action.state, action.reason) == (S.cleanup_unconfirmed, reason)


def test_an_early_wake_up_writes_nothing() -> None:
    op = _op(S.cleaning_up, next_poll_at=NOW + timedelta(seconds=5))
    assert isinstance(before_cleanup(op, CTX, NOW).action, NotYet)


def test_a_check_that_finds_it_gone_confirms_and_one_that_finds_it_waits() -> None:
    op = _op(S.cleaning_up, ended_as="expired")
    gone = after_cleanup(op, CTX, CHECK, reply(404, {"error": "NotFound"}), NOW, 0.5).action
    assert isinstance(gone, Finish) and gone.state is S.expired
    still = after_cleanup(op, CTX, CHECK, reply(200, {"status": "deleting"}), NOW, 0.5)
    assert isinstance(still.action, Wait)
    assert still.changes["poll_attempt"] == op.poll_attempt + 1


def test_a_reserved_check_whose_deadline_passed_is_not_sent() -> None:
    op = _op(S.cleaning_up)
    send = before_cleanup(op, CTX, NOW).action
    assert isinstance(send, Send)
    late = unsent(op, send, NOW + timedelta(minutes=11))
    assert late is not None and isinstance(late.action, Escalate)
    assert late.action.state is S.cleanup_unconfirmed


def test_a_cleanup_url_off_the_provider_origin_is_never_called() -> None:
    evil = replace(SPEC, path="https://evil.example/{job_id}")
    ctx = replace(CTX, contract=replace(CTX.contract, cleanup=evil))
    action = before_cleanup(_op(S.cleanup_pending), ctx, NOW).action
    assert isinstance(action, Escalate)
    assert action.state is S.cleanup_unconfirmed
    p = planned(_op(S.cleanup_pending), Decided(action=action))
    assert walked(S.cleanup_pending, p) == [S.cleanup_unconfirmed]


# --- a person's options -------------------------------------------------------------------


def test_an_unconfirmed_cleanup_offers_recheck_retry_and_abandon() -> None:
    op = _op(S.cleanup_unconfirmed)
    view = view_of(
        op, contract_has_cancel=True, business_deadline_passed=False, cleanup_checkable=True
    )
    assert [o.kind for o in options_for(view)] == [
        OptionKind.recheck_cleanup,
        OptionKind.retry_cleanup,
        OptionKind.abandon,
    ]
    blind = replace(view, cleanup_checkable=False)
    assert [o.kind for o in options_for(blind)] == [OptionKind.retry_cleanup, OptionKind.abandon]


@pytest.mark.parametrize(
    ("kind", "to"),
    [(OptionKind.recheck_cleanup, S.cleaning_up), (OptionKind.retry_cleanup, S.cleanup_pending)],
)
def test_a_picked_option_raises_the_bounds_and_walks_the_table(kind: OptionKind, to: S) -> None:
    op = _op(S.cleanup_unconfirmed)
    view = view_of(
        op, contract_has_cancel=True, business_deadline_passed=False, cleanup_checkable=True
    )
    decided = decide_option(
        op, view, kind, note="checked the console", now=NOW, cancel_window=timedelta(minutes=15)
    )
    p = planned(op, decided)
    assert walked(S.cleanup_unconfirmed, p) == [to]
    assert p.changes["max_status_requests"] == op.max_status_requests + 4
    assert p.changes["next_poll_at"] == NOW
    if to is S.cleaning_up:
        assert p.changes["cleanup_deadline"] == NOW + timedelta(minutes=15)
    else:
        # A retry's call gets its own fresh deadline when it is claimed.
        assert p.changes["cleanup_deadline"] is None
        retried = op.with_changes(p.changes)
        again = before_cleanup(retried, CTX, NOW).action
        assert isinstance(again, Send) and again.request == CALL
