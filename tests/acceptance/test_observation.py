"""Observing remote jobs: Retry-After, 429s, 404s, 401s, unknown states, contradictions,
deadlines, budgets and transport failures, checked against the sandbox request log."""

from __future__ import annotations

from datetime import datetime
from email.utils import parsedate_to_datetime
from itertools import pairwise
from typing import Any

from jobwarden.demo.harness import Stack
from tests.acceptance.conftest import Pipeline

# Scheduling tolerance, only ever in the permissive direction (a request may be late).
SLACK = 0.05


def _at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(entry["time"])


def _gaps(entries: list[dict[str, Any]]) -> list[float]:
    return [b["monotonic"] - a["monotonic"] for a, b in pairwise(entries)]


def _events(pipeline: Pipeline, op: str, kind: str) -> list[Any]:
    return [e.draft for e in pipeline.events(op) if e.draft.kind.value == kind]


def _observations(pipeline: Pipeline, op: str) -> list[Any]:
    """What each status answer said: an observed event, or the polled one with its wait."""
    return [e.draft for e in pipeline.events(op) if e.draft.kind.value in ("observed", "polled")]


def _waits(pipeline: Pipeline, op: str) -> list[Any]:
    # A wait after a status answer is recorded with it, in one polled event.
    waits = _events(pipeline, op, "decision") + _events(pipeline, op, "polled")
    return sorted((d for d in waits if d.cause == "wait"), key=lambda d: d.at)


def _assert_stopped_without_more_requests(pipeline: Pipeline, op: str, row: Any) -> None:
    """The stop is final: nothing is due, and every request sent was counted first."""
    assert row.next_poll_at is None
    log = pipeline.job_requests(op)
    statuses = [r for r in log if r["kind"] == "status"]
    assert len(statuses) == row.status_requests_used
    assert log[-1]["kind"] == "status"
    escalations = _events(pipeline, op, "escalated")
    assert len(escalations) == 1
    assert escalations[0].at >= _at(log[-1])


# -- 7. Retry-After -------------------------------------------------------------------


def test_503_with_retry_after_seconds_delays_the_next_status_request_at_least_that_long(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit(
        {"status_errors": {"code": 503, "count": 2, "retry_after": 1}, "polls_to_finish": 1}
    )
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    statuses = pipeline.job_requests(op, "status")
    assert [r["status"] for r in statuses] == [503, 503, 200]
    assert [r["retry_after"] for r in statuses[:2]] == ["1", "1"]
    for gap in _gaps(statuses):
        assert gap >= 1 - SLACK
    waits = _waits(pipeline, op)
    assert [w.delay_source for w in waits] == ["provider_retry_after"] * 2
    assert row.transport_failures_used == 2


def test_503_with_retry_after_as_http_date_delays_the_next_status_request_until_that_date(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit(
        {"status_errors": {"code": 503, "count": 1, "retry_after_date": 2}, "polls_to_finish": 1}
    )
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    statuses = pipeline.job_requests(op, "status")
    assert [r["status"] for r in statuses] == [503, 200]
    not_before = parsedate_to_datetime(statuses[0]["retry_after"])
    assert _at(statuses[1]) >= not_before
    waits = _waits(pipeline, op)
    assert [w.delay_source for w in waits] == ["provider_retry_after"]


# -- 8. 429 without Retry-After ------------------------------------------------------------


def test_repeated_429_without_retry_after_backs_off_then_escalates_rate_limited(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"status_errors": {"code": 429, "count": 20}, "never_finish": True})
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "rate_limited")
    statuses = pipeline.job_requests(op, "status")
    assert [r["status"] for r in statuses] == [429] * 5  # the contract's max_rate_limited
    assert all(r["retry_after"] is None for r in statuses)
    waits = _waits(pipeline, op)
    assert [w.delay_source for w in waits] == ["local_backoff"] * 4
    # Hard backoff from rate_limit_base (0.3 s), doubling, capped at max (1 s), jitter >= 0.5.
    delays = [w.excerpt["delay_seconds"] for w in waits]
    for attempt, delay in enumerate(delays):
        ceiling = min(1.0, 0.3 * 2**attempt)
        assert 0.5 * ceiling - 0.001 <= delay <= ceiling + 0.001, (attempt, delays)
    gaps = _gaps(statuses)
    for gap, delay in zip(gaps, delays, strict=True):
        assert gap >= delay - SLACK
    assert gaps[-1] > gaps[0]
    assert row.consecutive_rate_limited == 5
    _assert_stopped_without_more_requests(pipeline, op, row)


# -- 9. 404 -------------------------------------------------------------------------------


def test_404_right_after_create_is_tolerated_where_the_contract_allows_it(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"status_errors": {"code": 404, "count": 2}, "polls_to_finish": 1})
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    statuses = pipeline.job_requests(op, "status")
    assert [r["status"] for r in statuses] == [404, 404, 200]
    signals = [e.excerpt.get("signal") for e in _observations(pipeline, op)]
    assert signals[:2] == ["not_found", "not_found"]
    assert "escalated" not in pipeline.kinds(op)


def test_404_right_after_create_escalates_at_once_where_the_contract_has_no_grace(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit(
        {"status_errors": {"code": 404, "count": 2}, "polls_to_finish": 1},
        provider="sandbox_strict404",
    )
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason, row.escalation_detail) == (
        "escalated",
        "unknown_state",
        "not_found",
    )
    statuses = pipeline.job_requests(op, "status")
    assert [r["status"] for r in statuses] == [404]
    _assert_stopped_without_more_requests(pipeline, op, row)


# -- 10. 401 ------------------------------------------------------------------------------


def test_401_stops_at_once_and_escalates_authorization_denied(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"unauthorized_from": 2, "polls_to_finish": 5})
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "authorization_denied")
    log = pipeline.job_requests(op)
    assert [(r["kind"], r["status"]) for r in log] == [
        ("create", 202),
        ("status", 200),
        ("status", 401),
    ]
    _assert_stopped_without_more_requests(pipeline, op, row)


# -- 11. unknown state ------------------------------------------------------------------------


def test_unknown_remote_state_escalates_without_another_poll(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"unknown_state_at": 2, "polls_to_finish": 5})
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "unknown_state")
    assert "mystery" in row.escalation_detail
    assert row.last_remote_state == "mystery"
    assert len(pipeline.job_requests(op, "status")) == 2
    _assert_stopped_without_more_requests(pipeline, op, row)


# -- 12. contradictions -------------------------------------------------------------------


def test_succeeded_without_a_result_reference_is_a_contract_violation(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"succeed_without_result": True, "polls_to_finish": 2})
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "contract_violation")
    assert "succeeded_without_result_reference" in row.escalation_detail
    log = pipeline.job_requests(op)
    assert [r["kind"] for r in log] == ["create", "status", "status"]  # no result fetch
    assert row.result_reference is None
    _assert_stopped_without_more_requests(pipeline, op, row)


def test_running_after_its_own_expiry_is_a_contract_violation(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"expires_in_seconds": 0.5, "run_past_expiry": True, "never_finish": True})
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "contract_violation")
    assert "running_after_expiry" in row.escalation_detail
    observed = _observations(pipeline, op)
    expires_at = datetime.fromisoformat(observed[-1].excerpt["body"]["expires_at"])
    statuses = pipeline.job_requests(op, "status")
    # Answers read before the expiry were fine; the one read after it exposed the
    # contradiction. Judged by when jobwarden read each answer (its event's time): the
    # last request may leave a fraction of a millisecond before the expiry it outlives.
    assert observed[-1].at > expires_at
    assert all(o.at <= expires_at for o in observed[:-1])
    assert all(_at(r) <= expires_at for r in statuses[:-1])
    assert [o.excerpt.get("contradiction") for o in observed][-1] == "running_after_expiry"
    assert not any(o.excerpt.get("contradiction") for o in observed[:-1])
    _assert_stopped_without_more_requests(pipeline, op, row)


# -- 13. deadline ---------------------------------------------------------------------------


def test_result_deadline_passing_while_running_times_out_with_no_request_after_it(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"never_finish": True}, result_deadline_seconds=2)
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("result_timed_out", "deadline_exceeded")
    statuses = pipeline.job_requests(op, "status")
    assert len(statuses) >= 2
    # Request k went out on the reservation a decision made for it (its wait's
    # next_poll_at): each was planned before the deadline, and the wait clipped to the
    # deadline woke the step to escalate, never to send. Where a request arrived is no
    # proof for the last one: checked just before the deadline by the worker, it can be
    # logged after it by the sandbox on a loaded machine. Every earlier one was answered
    # before the next was planned, so it arrived before the deadline.
    drafts = [e.draft for e in pipeline.events(op)]
    plans = {
        d.excerpt["reserved_request"]: d.excerpt
        for d in drafts
        if d.excerpt and "reserved_request" in d.excerpt
    }
    for k in range(1, len(statuses) + 1):
        planned = datetime.fromisoformat(plans[k]["next_poll_at"])
        assert planned < row.result_deadline and not plans[k]["clipped_to_deadline"], (k, plans)
    assert all(_at(r) < row.result_deadline for r in statuses[:-1])
    escalated = _events(pipeline, op, "escalated")
    assert len(escalated) == 1 and escalated[0].at >= row.result_deadline
    _assert_stopped_without_more_requests(pipeline, op, row)


def test_absurd_retry_after_is_clipped_to_the_deadline_and_times_out_there(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"retry_after": 10**9, "never_finish": True}, result_deadline_seconds=2)
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("result_timed_out", "deadline_exceeded")
    statuses = pipeline.job_requests(op, "status")
    assert [r["retry_after"] for r in statuses] == [str(10**9)]
    assert _at(statuses[0]) < row.result_deadline
    (wait,) = _waits(pipeline, op)
    assert wait.delay_source == "provider_retry_after"
    assert wait.excerpt["clipped_to_deadline"] is True
    assert datetime.fromisoformat(wait.excerpt["next_poll_at"]) == row.result_deadline
    escalated = _events(pipeline, op, "escalated")
    assert len(escalated) == 1 and escalated[0].at >= row.result_deadline
    _assert_stopped_without_more_requests(pipeline, op, row)


# -- 14. budget -----------------------------------------------------------------------------


def test_status_request_budget_of_three_sends_exactly_three_then_escalates(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"never_finish": True}, max_status_requests=3)
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "request_budget_exhausted")
    assert len(pipeline.job_requests(op, "status")) == 3
    assert row.status_requests_used == 3
    # Each request is on the record once: claimed by a poll_sent, or (reserved by the
    # decision before it) carried by the event that records its answer.
    recorded = [
        e.draft
        for e in pipeline.events(op)
        if e.draft.kind.value == "poll_sent" or "request" in (e.draft.excerpt or {})
    ]
    assert [d.excerpt["request"] for d in recorded] == [1, 2, 3]
    _assert_stopped_without_more_requests(pipeline, op, row)


# -- 15. transport failures --------------------------------------------------------------------


def test_refused_connections_on_create_are_reconciled_then_escalate_provider_failure(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"polls_to_finish": 1}, provider="sandbox_unreachable")
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "provider_failure")
    assert row.create_attempts == 5  # the contract's max_create_attempts
    assert row.remote_job_id is None and row.status_url is None
    states = [e.draft.to_state for e in pipeline.events(op) if e.draft.to_state]
    assert "create_unknown" in states and "reconciling" in states
    assert pipeline.remote_jobs(op) == []
    assert pipeline.creates(op) == []
    assert row.status_requests_used == 0


def test_status_read_timeouts_past_the_transport_budget_escalate_provider_failure(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit(
        {"status_errors": {"code": "hold", "count": 5, "hold_seconds": 3}, "never_finish": True},
        max_transport_failures=2,
    )
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "provider_failure")
    assert "read_timeout" in row.escalation_detail
    assert row.transport_failures_used == 3
    assert len(pipeline.job_requests(op, "status")) == 3
    failures = [o.excerpt.get("transport_failure") for o in _observations(pipeline, op)]
    assert failures == ["read_timeout"] * 3
    assert row.next_poll_at is None
    assert row.status_requests_used == 3


# -- malformed body ----------------------------------------------------------------------------


def test_malformed_status_body_counts_against_the_transport_budget_and_is_kept(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"status_errors": {"code": "malformed", "count": 1}, "polls_to_finish": 1})
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    assert row.transport_failures_used == 1
    first = _observations(pipeline, op)[0]
    assert first.excerpt["body_problem"] == "malformed_json"
    assert first.excerpt["body_text"].startswith('{"status": "running"')
    assert [r["status"] for r in pipeline.job_requests(op, "status")] == [200, 200]


def test_malformed_status_bodies_past_the_budget_escalate_provider_failure(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit(
        {"status_errors": {"code": "malformed", "count": 9}, "never_finish": True},
        max_transport_failures=2,
    )
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "provider_failure")
    assert len(pipeline.job_requests(op, "status")) == 3
    _assert_stopped_without_more_requests(pipeline, op, row)


def test_status_body_without_a_state_is_an_unknown_state_and_stops_polling(
    stack: Stack, pipeline: Pipeline
) -> None:
    # The closest the sandbox gets to a malformed body: a 200 whose JSON names no state.
    op = pipeline.submit({"status_errors": {"code": 200, "count": 1}, "polls_to_finish": 1})
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "unknown_state")
    assert row.escalation_detail == "raw_state=None"
    statuses = pipeline.job_requests(op, "status")
    assert [r["status"] for r in statuses] == [200]
    _assert_stopped_without_more_requests(pipeline, op, row)


def test_a_deadline_spent_before_the_first_poll_times_out_without_any_status_request(
    stack: Stack, pipeline: Pipeline
) -> None:
    # The contract's first poll waits 0.1 s; the deadline is gone by then.
    op = pipeline.submit({"never_finish": True}, result_deadline_seconds=0.05)
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("result_timed_out", "deadline_exceeded")
    assert pipeline.job_requests(op, "status") == []
    assert row.status_requests_used == 0


def test_a_missing_credential_escalates_authorization_denied_without_sending_anything(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"polls_to_finish": 1}, provider="sandbox_nocred")
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "authorization_denied")
    assert "JOBWARDEN_NOT_SET_TOKEN" in row.escalation_detail
    assert pipeline.creates(op) == []
