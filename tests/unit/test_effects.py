"""``plan``: the one place an action becomes row changes and history events.

Tables per action (event kinds in order, from/to states, delay sources, wake-ups, where
the provider answer is recorded), the escalation hops, then properties that drive every
step through ``plan`` as the runner does and walk the events over the transition table.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields, replace
from datetime import datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobwarden.models.actions import (
    STOP_VIA,
    Accept,
    Collect,
    Decided,
    DelaySource,
    EscalationReason,
    Finish,
    Move,
    NotYet,
    ProviderRequest,
    RequestPurpose,
    Retry,
    Send,
    Succeed,
    Wait,
    escalate,
    stop_state,
)
from jobwarden.models.contracts.contract import ReconciliationPath, ReconciliationSpec
from jobwarden.models.effects import wake_changes
from jobwarden.models.history.chain import EventDraft, EventKind
from jobwarden.models.operation import COLUMNS, Operation
from jobwarden.models.plan import Plan, StoredResult
from jobwarden.models.polling.backoff import parse_retry_after
from jobwarden.models.polling.decisions import poll_view
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.provider.signals import RawResponse, TransportFailure
from jobwarden.models.results.validation import ResultVerdict
from jobwarden.models.states import AUTOMATION_STOPPED, TERMINAL, OperationState
from jobwarden.models.steps import STEPS, StepKind, unsent
from tests.unit.factories import (
    ACTOR,
    BASE,
    MAX_COUNTDOWN,
    NOW,
    TOKEN,
    claimed,
    context,
    operation,
    planned,
    reply,
    walked,
)

S = OperationState
R = EscalationReason
K = EventKind
MARK = "req-under-test"  # the provider request id of the answer a plan must record once


def kinds(p: Plan) -> list[K]:
    return [e.kind for e in p.events]


def hops(p: Plan) -> list[tuple[str | None, str | None]]:
    return [(e.from_state, e.to_state) for e in p.events]


def wait_for(seconds: float, source: DelaySource = DelaySource.local_backoff) -> Wait:
    return Wait(
        until=NOW + timedelta(seconds=seconds),
        delay_seconds=seconds,
        delay_source=source,
        clipped_to_deadline=False,
    )


def marked(raw: RawResponse) -> RawResponse:
    return replace(raw, provider_request_id=MARK)


def recorded(p: Plan) -> list[EventDraft]:
    """The events that carry the marked answer."""
    return [e for e in p.events if e.provider_request_id == MARK]


STATUS = ProviderRequest(purpose=RequestPurpose.status, method="GET", url=f"{BASE}/v1/jobs/j1")
VERDICT = ResultVerdict(valid=True, problem=None, sha256="ab" * 32, size_bytes=2, record_count=0)


# --- NotYet, Send, Wait, Move --------------------------------------------------------


@pytest.mark.parametrize("answer", [None, reply(200, {"status": "running"})])
def test_an_early_wake_up_writes_nothing_and_schedules_nothing(answer: RawResponse | None) -> None:
    p = planned(operation(S.observing), Decided(action=NotYet(until=NOW)), answer=answer)
    assert p == Plan()
    assert p.empty


@pytest.mark.parametrize(
    ("state", "move_to", "expected_hop", "state_change"),
    [
        (S.accepted, S.observing, ("accepted", "observing"), {"state": "observing"}),
        (S.observing, None, (None, None), {}),
        (S.observing, S.observing, (None, None), {}),  # a move to where it is is no move
    ],
)
def test_a_claim_commits_its_counter_and_one_sent_event_before_the_request(
    state: S,
    move_to: S | None,
    expected_hop: tuple[str | None, str | None],
    state_change: dict[str, str],
) -> None:
    send = Send(
        request=STATUS,
        event=K.poll_sent,
        counters={"status_requests_used": 4},
        move_to=move_to,
        excerpt={"request": 4, "of": 50},
        deadline=NOW + timedelta(hours=1),
    )
    p = planned(operation(state), Decided(action=send))
    assert kinds(p) == [K.poll_sent]
    assert hops(p) == [expected_hop]
    assert p.events[0].excerpt == {"request": 4, "of": 50}
    assert p.changes == {"status_requests_used": 4} | state_change
    assert p.next_at is None  # the request goes out now; no wake-up is published


def test_a_cancel_claim_sets_the_confirmation_timer_and_the_cancel_deadline() -> None:
    deadline, wake = NOW + timedelta(minutes=5), NOW + timedelta(seconds=2)
    send = Send(
        request=replace(STATUS, purpose=RequestPurpose.cancel, method="POST"),
        event=K.cancel_sent,
        move_to=S.cancelling,
        changes={"cancel_deadline": deadline},
        wake_at=wake,
    )
    p = planned(operation(S.cancel_requested), Decided(action=send))
    assert kinds(p) == [K.cancel_sent]
    assert hops(p) == [("cancel_requested", "cancelling")]
    assert p.changes == {
        "state": "cancelling",
        "cancel_deadline": deadline,
        "next_poll_at": wake,
        "dispatched_at": wake,
    }


def test_a_claim_that_follows_an_answer_records_the_answer_first() -> None:
    send = Send(
        request=replace(STATUS, purpose=RequestPurpose.create, method="POST"),
        event=K.reconcile_sent,
        counters={"create_attempts": 3},
        cause="lookup found no job under our token (http 200)",
    )
    answer = marked(reply(200, {"data": []}))
    decided = Decided(action=send, answered="lookup response")
    p = planned(operation(S.reconciling), decided, answer=answer)
    assert kinds(p) == [K.observed, K.reconcile_sent]
    assert p.events[0].cause == "lookup response"
    assert recorded(p) == [p.events[0]]
    assert p.changes == {"create_attempts": 3, "last_http_status": 200}


@pytest.mark.parametrize("source", list(DelaySource))
@pytest.mark.parametrize(
    ("seconds", "dispatched"),
    [(1.0, True), (MAX_COUNTDOWN, True), (MAX_COUNTDOWN + 0.001, False), (3600.0, False)],
)
def test_a_wait_records_its_delay_source_and_parks_when_beyond_the_countdown(
    source: DelaySource, seconds: float, dispatched: bool
) -> None:
    wait = Wait(
        until=NOW + timedelta(seconds=seconds),
        delay_seconds=seconds,
        delay_source=source,
        clipped_to_deadline=False,
        cause="why",
    )
    p = planned(operation(S.observing), Decided(action=wait, changes={"poll_attempt": 2}))
    (event,) = p.events
    assert (event.kind, event.from_state, event.to_state) == (K.decision, None, None)
    assert (event.cause, event.delay_source) == ("why", source.value)
    assert event.excerpt == {
        "next_poll_at": wait.until.isoformat(),
        "delay_seconds": round(seconds, 3),
        "clipped_to_deadline": False,
        "reserved_request": 1,  # the request it waits for, counted on this commit
    }
    provider_said = source in (DelaySource.provider_retry_after, DelaySource.provider_poll_hint)
    # The wait's commit also reserves (counts) the status request it waits for.
    assert p.changes == {
        "poll_attempt": 2,
        "next_poll_at": wait.until,
        "dispatched_at": wait.until if dispatched else None,
        "status_requests_used": 1,
        "reserved_request": 1,
    } | ({"poll_not_before": wait.until} if provider_said else {})
    assert p.next_at == wait.until


def test_a_wait_after_a_status_answer_is_one_polled_event_with_the_observation_and_decision() -> (
    None
):
    answer = marked(reply(503, headers={"retry-after": "9"}))
    wait = wait_for(9, DelaySource.provider_retry_after)
    p = planned(operation(S.observing), Decided(action=wait, seen={"signal": "x"}), answer=answer)
    assert kinds(p) == [K.polled]
    assert recorded(p) == [p.events[0]]
    (event,) = p.events
    assert event.http_status == 503
    assert (event.cause, event.delay_source) == ("wait", "provider_retry_after")
    assert event.excerpt == {
        "signal": "x",
        "headers": {"retry-after": "9"},
        "next_poll_at": wait.until.isoformat(),
        "delay_seconds": 9.0,
        "clipped_to_deadline": False,
        "reserved_request": 1,
    }
    assert p.changes["last_http_status"] == 503


def test_a_wait_after_a_cancel_answer_records_the_observation_then_the_decision() -> None:
    answer = marked(reply(202))
    p = planned(
        operation(S.cancelling),
        Decided(action=wait_for(2), answered="cancel response"),
        answer=answer,
    )
    assert kinds(p) == [K.observed, K.decision]
    assert recorded(p) == [p.events[0]]
    assert p.events[0].cause == "cancel response"


def test_a_transport_failure_is_observed_with_its_failure_and_no_status() -> None:
    answer = marked(reply(None, failure=TransportFailure.read_timeout))
    p = planned(operation(S.observing), Decided(action=wait_for(2)), answer=answer)
    assert kinds(p) == [K.polled]
    assert p.events[0].http_status is None
    assert p.events[0].excerpt is not None
    assert p.events[0].excerpt["transport_failure"] == "read_timeout"
    assert p.changes["last_http_status"] is None


@pytest.mark.parametrize(
    ("answer", "expected"),
    [(None, [K.create_ambiguous]), (reply(503), [K.observed, K.create_ambiguous])],
)
def test_a_move_is_one_event_with_its_cause_and_a_wake_up_now(
    answer: RawResponse | None, expected: list[K]
) -> None:
    move = Move(to=S.create_unknown, event=K.create_ambiguous, cause="lost", wake_at=NOW)
    p = planned(operation(S.create_pending, create_attempts=1), Decided(action=move), answer=answer)
    assert kinds(p) == expected
    assert hops(p)[-1] == ("create_pending", "create_unknown")
    assert p.events[-1].cause == "lost"
    assert {k: p.changes[k] for k in ("state", "next_poll_at", "dispatched_at")} == {
        "state": "create_unknown",
        "next_poll_at": NOW,
        "dispatched_at": NOW,
    }
    assert p.next_at == NOW


def test_a_move_to_the_state_it_is_in_records_the_decision_without_a_transition() -> None:
    move = Move(to=S.reconciling, event=K.create_ambiguous, cause="again", wake_at=NOW)
    p = planned(operation(S.reconciling), Decided(action=move))
    assert kinds(p) == [K.create_ambiguous]
    assert hops(p) == [(None, None)]
    assert "state" not in p.changes


# --- Accept, Retry, Collect ----------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (S.create_pending, K.create_accepted),
        (S.create_pending, K.create_replayed),
        (S.reconciling, K.reconciled),
    ],
)
def test_an_accept_folds_the_answer_into_its_event_then_records_the_first_poll(
    state: S, event: K
) -> None:
    first = replace(wait_for(0.2, DelaySource.initial_delay), cause="first_poll")
    accept = Accept(job_id="job-1", status_url=f"{BASE}/v1/jobs/job-1", wait=first, event=event)
    answer = marked(reply(202, {"id": "job-1"}))
    p = planned(operation(state), Decided(action=accept, seen={"job_id": "job-1"}), answer=answer)
    assert kinds(p) == [event, K.decision]
    assert hops(p) == [(state.value, "accepted"), (None, None)]
    assert recorded(p) == [p.events[0]]
    assert p.events[0].http_status == 202
    assert p.events[0].excerpt == {"job_id": "job-1", "body": {"id": "job-1"}}
    assert (p.events[1].cause, p.events[1].delay_source) == ("first_poll", "initial_delay")
    assert p.changes == {
        "state": "accepted",
        "remote_job_id": "job-1",
        "status_url": f"{BASE}/v1/jobs/job-1",
        "accepted_at": NOW,
        "next_poll_at": first.until,
        "dispatched_at": first.until,
        "last_http_status": 202,
        # The accept's commit reserves the first status request.
        "status_requests_used": 1,
        "reserved_request": 1,
    }
    assert p.next_at == first.until


@pytest.mark.parametrize(
    ("state", "retry", "hop", "extra"),
    [
        (
            S.create_pending,
            Retry(
                wait=wait_for(0.4),
                event=K.create_ambiguous,
                to=S.create_unknown,
                detail="server_error: http_503",
                counts_transport_failure=True,
            ),
            ("create_pending", "create_unknown"),
            {"state": "create_unknown", "transport_failures_used": 2},
        ),
        (
            S.reconciling,
            Retry(
                wait=wait_for(0.4),
                event=K.create_ambiguous,
                to=S.reconciling,
                detail="malformed: http_200",
                counts_transport_failure=False,
            ),
            (None, None),
            {},
        ),
        (
            S.create_pending,
            Retry(
                wait=wait_for(30, DelaySource.provider_retry_after),
                event=K.create_refused,
                to=None,
                detail="rate_limited",
                counts_transport_failure=False,
            ),
            (None, None),
            {},
        ),
    ],
)
def test_a_retry_is_one_event_with_the_answer_its_delay_source_and_the_next_attempt(
    state: S, retry: Retry, hop: tuple[str | None, str | None], extra: dict[str, Any]
) -> None:
    op = operation(state, create_attempts=1, transport_failures_used=1)
    answer = marked(reply(503))
    p = planned(op, Decided(action=retry), answer=answer)
    (event,) = p.events
    assert recorded(p) == [event]
    assert (event.kind, (event.from_state, event.to_state)) == (retry.event, hop)
    assert (event.cause, event.delay_source) == (retry.detail, retry.wait.delay_source.value)
    assert event.excerpt is not None
    assert event.excerpt["next_attempt_at"] == retry.wait.until.isoformat()
    assert (
        p.changes
        == {
            "last_http_status": 503,
            "next_poll_at": retry.wait.until,
            "dispatched_at": retry.wait.until,
        }
        | extra
    )
    assert p.next_at == retry.wait.until


@pytest.mark.parametrize("state", [S.observing, S.cancelling])
def test_a_finished_job_moves_to_result_collecting_with_what_the_status_promised(
    state: S,
) -> None:
    deadline = NOW + timedelta(minutes=15)
    collect = Collect(
        result_ref="/v1/jobs/j1/result", expected={"expected_sha256": "ab"}, deadline=deadline
    )
    answer = marked(reply(200, {"status": "succeeded"}))
    p = planned(operation(state), Decided(action=collect), answer=answer)
    assert kinds(p) == [K.observed, K.decision]
    assert hops(p)[1] == (state.value, "result_collecting")
    assert recorded(p) == [p.events[0]]
    assert {k: v for k, v in p.changes.items() if k != "last_http_status"} == {
        "state": "result_collecting",
        "result_reference": "/v1/jobs/j1/result",
        "validation_summary": {"expected": {"expected_sha256": "ab"}},
        "collect_deadline": deadline,
        "next_poll_at": NOW,
        "dispatched_at": NOW,
    }
    assert p.next_at == NOW


# --- Finish and Succeed --------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "finish", "expected"),
    [
        (S.observing, Finish(state=S.failed, reason="remote_failed"), [K.observed, K.decision]),
        (S.observing, Finish(state=S.expired, reason="remote_expired"), [K.observed, K.decision]),
        (
            S.cancelling,
            Finish(state=S.cancelled, reason="remote_cancelled", event=K.cancel_confirmed),
            [K.observed, K.cancel_confirmed],
        ),
        (
            S.create_pending,
            Finish(state=S.failed, reason="http_400", event=K.create_refused),
            [K.create_refused],
        ),
        (
            S.result_collecting,
            Finish(
                state=S.result_unavailable,
                reason="HTTP 410 fetching the result",
                event=K.result_rejected,
                summary={"valid": False, "problem": "HTTP 410 fetching the result"},
            ),
            [K.result_rejected],
        ),
    ],
)
def test_an_ending_is_one_event_after_the_observation_unless_it_carries_the_answer(
    state: S, finish: Finish, expected: list[K]
) -> None:
    p = planned(operation(state), Decided(action=finish), answer=marked(reply(400)))
    assert kinds(p) == expected
    assert hops(p)[-1] == (state.value, finish.state.value)
    assert p.events[-1].cause == finish.reason
    assert len(recorded(p)) == 1
    assert p.changes["state"] == finish.state.value
    assert (p.changes["next_poll_at"], p.changes["dispatched_at"]) == (None, None)
    assert p.next_at is None
    if finish.summary is not None:
        assert p.changes["validation_summary"] == finish.summary
        assert p.events[-1].excerpt == finish.summary
    else:
        assert "validation_summary" not in p.changes


def test_an_ending_decided_without_an_answer_records_no_observation() -> None:
    finish = Finish(
        state=S.result_unavailable,
        reason="inline result missing",
        event=K.result_rejected,
        summary={"valid": False, "problem": "inline result missing"},
    )
    p = planned(operation(S.result_collecting), Decided(action=finish))
    assert kinds(p) == [K.result_rejected]
    assert p.events[0].http_status is None
    assert p.events[0].excerpt == finish.summary
    assert "last_http_status" not in p.changes


@pytest.mark.parametrize(
    ("succeed", "stored"),
    [
        (
            Succeed(verdict=VERDICT, content=b"[]", content_type="application/json"),
            StoredResult(content=b"[]", content_type="application/json", verdict=VERDICT),
        ),
        (
            Succeed(verdict=VERDICT, content=b"", content_type=None),
            StoredResult(content=b"", content_type=None, verdict=VERDICT),
        ),
        (Succeed(verdict=VERDICT, content=None, content_type=None), None),
        (Succeed(verdict=None, content=b"[]", content_type="application/json"), None),
        (Succeed(verdict=None, content=None, content_type=None, note="no result"), None),
    ],
)
def test_success_stores_a_result_only_with_a_verdict_and_content(
    succeed: Succeed, stored: StoredResult | None
) -> None:
    answer = marked(reply(200, content=b"[]"))
    p = planned(operation(S.result_collecting), Decided(action=succeed), answer=answer)
    assert kinds(p) == [K.result_collected]
    assert hops(p) == [("result_collecting", "succeeded")]
    assert recorded(p) == [p.events[0]]
    assert p.result == stored
    summary = (
        VERDICT.summary()
        if succeed.verdict is not None
        else {"valid": True, "problem": None, "note": succeed.note}
    )
    assert p.changes["validation_summary"] == summary
    assert p.events[0].excerpt == summary
    assert (p.changes["state"], p.changes["next_poll_at"]) == ("succeeded", None)


# --- escalation: hops, the cancelling rule, deadline while observing -------------------

ACTIVE = [
    S.create_pending,
    S.create_unknown,
    S.reconciling,
    S.accepted,
    S.observing,
    S.cancel_requested,
    S.cancelling,
    S.result_collecting,
]


def expected_stop(state: S, reason: R) -> list[S]:
    """The stop path written out by hand from DESIGN's state diagram."""
    if state is S.cancel_requested:
        return [S.cancelling, S.cancellation_unconfirmed]
    if state is S.cancelling:
        return [S.cancellation_unconfirmed]
    end = (
        S.result_timed_out
        if reason is R.deadline_exceeded and state in (S.accepted, S.observing)
        else S.escalated
    )
    if state is S.accepted:
        return [S.observing, end]
    if state is S.create_unknown:
        return [S.reconciling, end]
    return [end]


@pytest.mark.parametrize("reason", list(R))
@pytest.mark.parametrize("state", ACTIVE)
def test_every_stop_walks_allowed_hops_to_its_stop_state(state: S, reason: R) -> None:
    action = escalate(state, reason, "why")
    assert action.state is stop_state(state, reason) is expected_stop(state, reason)[-1]
    p = planned(operation(state), Decided(action=action))
    assert walked(state, p) == expected_stop(state, reason)
    *hop, last = p.events
    assert [e.kind for e in hop] == [K.decision] * len(hop)
    assert all(e.cause == "stopping: why" for e in hop)
    if hop:
        assert STOP_VIA[state].value == hop[0].to_state
    assert (last.kind, last.cause, last.excerpt) == (K.escalated, reason.value, {"detail": "why"})
    assert p.changes == {
        "state": action.state.value,
        "escalation_reason": reason.value,
        "escalation_detail": "why",
        "next_poll_at": None,
        "dispatched_at": None,
    }
    assert p.next_at is None


def test_a_stop_that_saw_a_job_keeps_its_id_and_records_the_answer_first() -> None:
    action = escalate(S.create_pending, R.contract_violation, "no status", keep_job_id="job-1")
    answer = marked(reply(202, {"id": "job-1"}))
    p = planned(operation(S.create_pending), Decided(action=action), answer=answer)
    assert kinds(p) == [K.observed, K.escalated]
    assert recorded(p) == [p.events[0]]
    assert (p.changes["remote_job_id"], p.changes["last_http_status"]) == ("job-1", 202)


def test_a_stop_from_accepted_after_an_answer_hops_through_observing() -> None:
    action = escalate(S.accepted, R.deadline_exceeded, "result deadline passed")
    p = planned(operation(S.accepted), Decided(action=action), answer=marked(reply(200)))
    assert kinds(p) == [K.observed, K.decision, K.escalated]
    assert hops(p) == [(None, None), ("accepted", "observing"), ("observing", "result_timed_out")]


def test_wake_changes_clear_both_timers_when_there_is_nothing_to_wait_for() -> None:
    assert wake_changes(None, NOW, MAX_COUNTDOWN) == {"next_poll_at": None, "dispatched_at": None}


@pytest.mark.parametrize(
    ("decided", "folded"),
    [
        (Decided(action=wait_for(1)), True),  # a status answer and its wait: one polled event
        (
            Decided(
                action=Move(to=S.create_unknown, event=K.create_ambiguous, cause="c", wake_at=NOW)
            ),
            False,
        ),
        (Decided(action=escalate(S.create_pending, R.authorization_denied, "d")), False),
        (Decided(action=Finish(state=S.failed, reason="r")), False),
        (Decided(action=Finish(state=S.failed, reason="r", event=K.create_refused)), True),
        (
            Decided(
                action=Retry(
                    wait=wait_for(1),
                    event=K.create_refused,
                    to=None,
                    detail="rate_limited",
                    counts_transport_failure=False,
                )
            ),
            True,
        ),
        (
            Decided(
                action=Accept(job_id="j", status_url="u", wait=wait_for(1), event=K.create_accepted)
            ),
            True,
        ),
    ],
)
def test_an_answer_is_in_the_history_exactly_once(decided: Decided, folded: bool) -> None:
    op = operation(S.create_pending, create_attempts=1)
    with_answer = planned(op, decided, answer=marked(reply(200, {"id": "j"})))
    (carrier,) = recorded(with_answer)
    assert (carrier.kind is K.observed) is not folded
    assert carrier is with_answer.events[0]
    assert [e.kind for e in with_answer.events].count(K.observed) == (0 if folded else 1)
    without = planned(op, decided)
    assert K.observed not in kinds(without)
    assert "last_http_status" not in without.changes


# --- properties: every step, arbitrary answers, only allowed transitions -------------

SANDBOX = context()
CONTEXTS: list[StepContext] = [
    SANDBOX,
    context("operation_location"),
    context("google_aip151"),
    context("openai_batch"),
    context(
        reconciliation=ReconciliationSpec(
            path=ReconciliationPath.lookup_by_reference,
            lookup_path="/v1/jobs?reference={token}",
            lookup_job_id_pointer="/data/0/id",
        )
    ),
    context(reconciliation=ReconciliationSpec(path=ReconciliationPath.none)),
    context(result=None),
]
WORDS = sorted(
    {
        word
        for c in CONTEXTS
        for f in fields(c.contract.states)
        # The state classes and the error/detail tables; not `otherwise` or `case_insensitive`.
        if isinstance(getattr(c.contract.states, f.name), frozenset | dict)
        for word in getattr(c.contract.states, f.name)
    }
    | {"true", "false", "unheard-of"}
)
KEYS = st.sampled_from(
    [
        "id",
        "name",
        "status",
        "done",
        "error",
        "response",
        "data",
        "result",
        "url",
        "sha256",
        "progress",
        "percentComplete",
        "poll_after_seconds",
        "expires_at",
        "output_file_id",
        "resourceLocation",
        "items",
        "failed_items",
        "record_count",
    ]
) | st.text(max_size=4)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(WORDS)
    | st.sampled_from(["job-1", "job-2", "/v1/jobs/job-1/result", "https://evil.example/r"])
    | st.text(max_size=8)
)
BODIES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=12,
)
# Answers a provider would plausibly give, so the properties reach every branch, not only
# the "unreadable" ones.
PLAUSIBLE = st.sampled_from(
    [
        {"id": "job-1", "status": "queued"},
        {"id": "job-2", "status": "running", "progress": 40, "poll_after_seconds": 3},
        {"id": "job-1", "status": "succeeded", "result": {"url": "/v1/jobs/job-1/result"}},
        {"id": "job-1", "status": "failed", "error": {"code": "x"}},
        {"id": "job-1", "status": "cancelled"},
        {"id": "job-1", "status": "expired"},
        {"name": "operations/abc", "done": False},
        {"name": "operations/abc", "done": True, "response": {"rows": 1}},
        {"name": "operations/abc", "done": True, "error": {"code": 13}},
        {"id": "batch_1", "status": "completed", "output_file_id": "file-1"},
        {"status": "Running", "percentComplete": 50},
        {"status": "Succeeded", "resourceLocation": "https://evil.example/r"},
        {"data": [{"id": "job-1"}]},
        {"data": []},
        {"items": [], "failed_items": [], "record_count": 0},
    ]
)
RETRY_AFTERS = st.one_of(
    st.none(),
    st.integers(0, 120).map(str),  # within most deadlines: must be honoured to the second
    st.integers(0, 10**7).map(str),
    st.integers(-60, 600).map(lambda s: format_datetime(NOW + timedelta(seconds=s), usegmt=True)),
    st.text(max_size=12),
)
URLS = st.sampled_from(
    [
        f"{BASE}/v1/jobs/job-1",
        "/v1/jobs/job-1",
        "https://example.cognitiveservices.azure.com/operations/1",
        "https://evil.example/operations/1",
        "",
    ]
) | st.text(max_size=10)
CODES = st.sampled_from([200, 201, 202, 204, 400, 401, 403, 404, 409, 410, 422, 429, 500, 503])


@st.composite
def answers(draw: st.DrawFn) -> RawResponse:
    status = draw(st.none() | CODES | st.integers(100, 599))
    headers: dict[str, str] = {}
    for name, values in (
        ("retry-after", RETRY_AFTERS),
        ("location", st.none() | URLS),
        ("operation-location", st.none() | URLS),
        ("idempotent-replayed", st.none() | st.sampled_from(["true", "false"])),
    ):
        value = draw(values)
        if value is not None:
            headers[name] = value
    problem = draw(st.one_of(st.none(), st.none(), st.none(), st.just("malformed_json")))
    body = draw(st.one_of(PLAUSIBLE, PLAUSIBLE, BODIES))
    content = draw(
        st.one_of(
            st.binary(max_size=40), (PLAUSIBLE | BODIES).map(lambda b: json.dumps(b).encode())
        )
    )
    return reply(
        status,
        None if problem else body,
        headers=headers,
        failure=draw(st.sampled_from(list(TransportFailure))) if status is None else None,
        body_problem=problem,
        content=content,
        content_type=draw(
            st.none() | st.sampled_from(["application/json", "text/csv", "application/jsonl"])
        ),
        request_id=MARK,
    )


def offset(seconds: st.SearchStrategy[float]) -> st.SearchStrategy[datetime]:
    return seconds.map(lambda s: NOW + timedelta(seconds=s))


def mostly_ahead(horizon: float) -> st.SearchStrategy[datetime]:
    """A bound that has usually not passed yet, and sometimes has (or passes meanwhile)."""
    ahead = st.floats(120, horizon)
    return offset(st.one_of(ahead, ahead, ahead, st.floats(-60, horizon)))


@st.composite
def operations(draw: st.DrawFn, step: StepKind, base_url: str) -> Operation:
    """Any snapshot a step may load: its states, counters on both sides of their bounds."""
    sha = hashlib.sha256(b"[]").hexdigest()
    own_refs = st.sampled_from(["/v1/jobs/job-1/result", f"{base_url}/r/1", "file-1"])
    expected = draw(
        st.none()
        | st.fixed_dictionaries(
            {},
            optional={
                "expected_sha256": st.none() | st.just(sha) | st.text(max_size=4),
                "inline": st.none() | BODIES,
            },
        )
    )
    return operation(
        draw(st.sampled_from(sorted(step.states))),
        create_attempts=draw(st.integers(0, 6)),
        last_event_kind=draw(st.just(K.intent_recorded) | st.sampled_from(list(K))),
        approval_expires_at=draw(st.one_of(st.none(), st.none(), mostly_ahead(600))),
        create_deadline=draw(mostly_ahead(900)),
        result_deadline=draw(mostly_ahead(7200)),
        cancel_deadline=draw(st.none() | mostly_ahead(900)),
        accepted_at=draw(st.none() | offset(st.floats(-600, 0))),
        next_poll_at=draw(st.one_of(st.none(), st.just(NOW), offset(st.floats(-60, 120)))),
        remote_job_id=draw(st.sampled_from([None, "job-1", "job-1", "operations/abc"])),
        status_url=draw(
            st.sampled_from([None, "https://evil.example/v1/jobs/job-1"] + [f"{base_url}/j/1"] * 4)
        ),
        result_reference=draw(st.one_of(st.none(), own_refs, own_refs, URLS)),
        validation_summary=None if expected is None else {"expected": expected},
        status_requests_used=draw(st.integers(0, 52)),
        transport_failures_used=draw(st.integers(0, 4)),
        consecutive_rate_limited=draw(st.integers(0, 6)),
        poll_attempt=draw(st.integers(0, 40)),
    )


def check(op: Operation, p: Plan, answer: RawResponse | None) -> Operation:
    """What every plan must satisfy; returns the snapshot as the store would hold it."""
    walked(op.state, p)  # raises TransitionRefusedError off the table
    assert set(p.changes) <= COLUMNS
    if answer is not None and not p.empty:
        assert len(recorded(p)) == 1, kinds(p)
        assert p.changes["last_http_status"] == answer.observation.status_code
    if answer is None:
        assert K.observed not in kinds(p)
    stored = op.with_changes(p.changes)
    if stored.state in TERMINAL | AUTOMATION_STOPPED:
        assert stored.next_poll_at is None  # nothing wakes a stopped operation
    if p.result is not None:
        # Bytes are stored with a validated success, or kept (the provider's, read whole)
        # with a validation failure a person may still accept; never with any other end.
        verdict = p.result.verdict
        assert (stored.state is S.succeeded and verdict.valid) or (
            stored.state is S.result_validation_failed and not verdict.valid and verdict.keepable
        )
    return stored


def honours_retry_after(
    action: object, answer: RawResponse, deadline: datetime, now: datetime
) -> None:
    header = answer.observation.headers.get("retry-after")
    retry_after = parse_retry_after(header, now)
    wait = action.wait if isinstance(action, Retry | Accept) else action
    if not isinstance(wait, Wait) or not retry_after.valid or isinstance(action, Accept):
        return
    assert retry_after.seconds is not None
    assert wait.until <= max(deadline, now)
    if wait.clipped_to_deadline:
        assert wait.until == deadline
    else:
        assert (wait.until - now).total_seconds() >= retry_after.seconds


def drive(
    step: StepKind,
    op: Operation,
    ctx: StepContext,
    now: datetime,
    replies: list[RawResponse],
    u: float,
    late: float,
) -> None:
    """The runner's loop without I/O: before, claim, deadline recheck, after, plan."""
    decided = step.before(op, ctx, now)
    p = planned(op, decided, now=now)
    check(op, p, None)
    for answer in replies:
        send = decided.action
        if not isinstance(send, Send):
            return
        if send.request.purpose is RequestPurpose.create:
            assert TOKEN in json.dumps([dict(send.request.headers), send.request.json_body])
        if send.request.purpose is RequestPurpose.lookup:
            assert TOKEN in send.request.url
        if send.request.purpose is RequestPurpose.status:
            # Invariant 3: the budget and the deadline are checked before the request.
            assert op.status_requests_used < op.max_status_requests
            assert now < poll_view(op).deadline
        op = claimed(op, p)
        sent_at = now + timedelta(seconds=late)
        not_sent = unsent(op, send, sent_at)
        if not_sent is not None:
            check(op, planned(op, not_sent, now=sent_at), None)
            return
        decided = step.after(op, ctx, send.request, answer, sent_at, u)
        if step.name == "create":
            assert not isinstance(decided.action, Send)  # one create per step, never a resend
        p = planned(op, decided, now=sent_at, answer=answer)
        check(op, p, answer)
        if step.name in ("create", "reconcile"):
            honours_retry_after(decided.action, answer, op.create_deadline, sent_at)
        if step.name == "poll":
            honours_retry_after(decided.action, answer, poll_view(op).deadline, sent_at)
        now = sent_at


@pytest.mark.parametrize("step", STEPS, ids=[s.name for s in STEPS])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    ctx=st.sampled_from(CONTEXTS),
    elapsed=st.one_of(
        st.floats(-5, 60), st.floats(-5, 60), st.floats(-5, 60), st.floats(-30, 7300)
    ),
    late=st.one_of(st.just(0.0), st.floats(0, 1), st.floats(0, 900)),
    u=st.floats(0, 1),
    replies=st.lists(answers(), min_size=2, max_size=2),
)
def test_every_step_walks_only_allowed_transitions_whatever_the_provider_answers(
    step: StepKind,
    data: st.DataObject,
    ctx: StepContext,
    elapsed: float,
    late: float,
    u: float,
    replies: list[RawResponse],
) -> None:
    op = data.draw(operations(step, ctx.base_url))
    drive(step, op, ctx, NOW + timedelta(seconds=elapsed), replies, u, late)


@settings(max_examples=60, deadline=None)
@given(
    state=st.sampled_from(ACTIVE),
    reason=st.sampled_from(list(R)),
    answer=st.none() | answers(),
    keep=st.none() | st.just("job-9"),
)
def test_every_stop_from_an_active_state_is_allowed_with_or_without_an_answer(
    state: S, reason: R, answer: RawResponse | None, keep: str | None
) -> None:
    op = operation(state)
    p = planned(op, Decided(action=escalate(state, reason, "d", keep_job_id=keep)), answer=answer)
    stored = check(op, p, answer)
    assert stored.state is stop_state(state, reason)
    assert stored.remote_job_id == keep


@settings(max_examples=60, deadline=None)
@given(
    seconds=st.floats(0, 10**6),
    max_countdown=st.floats(0, 3600),
    source=st.sampled_from(list(DelaySource)),
)
def test_a_wait_is_parked_exactly_when_it_is_longer_than_a_countdown(
    seconds: float, max_countdown: float, source: DelaySource
) -> None:
    wait = wait_for(seconds, source)
    p = planned(operation(S.observing), Decided(action=wait), max_countdown=max_countdown)
    parked = (wait.until - NOW).total_seconds() > max_countdown
    assert p.changes["next_poll_at"] == wait.until
    assert p.changes["dispatched_at"] == (None if parked else wait.until)
    assert p.events[0].delay_source == source.value
    assert p.events[0].actor == ACTOR


def test_a_step_is_timed_on_the_last_event_of_its_write_only() -> None:
    from datetime import UTC

    from jobwarden.models.effects import timed

    at = datetime(2030, 1, 1, tzinfo=UTC)
    first = EventDraft(kind=EventKind.polled, actor="w", at=at, excerpt={"request": 2, "of": 5})
    last = EventDraft(kind=EventKind.decision, actor="w", at=at)
    p = timed(Plan(events=(first, last)), "poll", 0.0421)
    assert p.events[0] == first
    assert p.events[1].excerpt == {"step": "poll", "step_seconds": 0.0421}
    # Nothing written, nothing timed.
    assert timed(Plan(), "poll", 1.0) == Plan()
