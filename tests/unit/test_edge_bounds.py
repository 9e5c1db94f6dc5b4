"""Bounds the core keeps whatever a provider sends: result collection's own budget and
deadline, unusable references, and the provider's last Retry-After after a wake-up."""

from __future__ import annotations

from datetime import timedelta

from jobwarden.models.actions import (
    Collect,
    DelaySource,
    Escalate,
    EscalationReason,
    RequestPurpose,
    Send,
    Wait,
)
from jobwarden.models.create_decisions import after_create
from jobwarden.models.results.decisions import before_collect
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import after_poll, before_cancel, before_poll, unsent
from tests.unit.factories import BASE, NOW, answer, context, operation

CTX = context()
JOB = f"{BASE}/v1/jobs/job_1"


def _collecting(**overrides: object) -> object:
    return operation(
        S.result_collecting,
        remote_job_id="job_1",
        status_url=JOB,
        result_reference=f"{BASE}/v1/results/job_1",
        **overrides,
    )


def test_result_collection_stops_once_its_own_fetch_budget_is_spent() -> None:
    spent = CTX.contract.limits.max_result_fetches
    decided = before_collect(_collecting(result_fetch_attempts=spent), CTX, NOW)  # type: ignore[arg-type]
    assert isinstance(decided.action, Escalate)
    assert decided.action.reason is EscalationReason.provider_failure


def test_result_collection_stops_at_its_deadline_before_any_download() -> None:
    late = _collecting(collect_deadline=NOW - timedelta(seconds=1))
    decided = before_collect(late, CTX, NOW)  # type: ignore[arg-type]
    assert isinstance(decided.action, Escalate)
    assert decided.action.reason is EscalationReason.deadline_exceeded


def test_each_download_is_counted_before_it_leaves_and_bounded_by_the_deadline() -> None:
    deadline = NOW + timedelta(minutes=5)
    decided = before_collect(_collecting(collect_deadline=deadline), CTX, NOW)  # type: ignore[arg-type]
    send = decided.action
    assert isinstance(send, Send) and send.request.purpose is RequestPurpose.result
    assert send.counters == {"result_fetch_attempts": 1} and send.deadline == deadline
    late = unsent(_collecting(collect_deadline=deadline), send, deadline)  # type: ignore[arg-type]
    assert late is not None and isinstance(late.action, Escalate)


def test_a_finished_job_gets_a_collection_deadline_from_the_contract() -> None:
    op = operation(S.observing, remote_job_id="job_1", status_url=JOB)
    ok = answer(200, {"status": "succeeded", "result": {"url": f"{BASE}/v1/results/job_1"}})
    decided = after_poll(op, CTX, before_poll(op, CTX, NOW).action.request, ok, NOW, 1.0)  # type: ignore[union-attr]
    assert isinstance(decided.action, Collect)
    window = timedelta(seconds=CTX.contract.limits.result_fetch_deadline_seconds)
    assert decided.action.deadline == NOW + window


def test_a_result_reference_with_a_newline_is_a_contract_violation_not_a_crash() -> None:
    op = operation(S.observing, remote_job_id="job_1", status_url=JOB)
    bad = answer(200, {"status": "succeeded", "result": {"url": f"{BASE}/v1/r\n/x"}})
    request = before_poll(op, CTX, NOW).action.request  # type: ignore[union-attr]
    decided = after_poll(op, CTX, request, bad, NOW, 1.0)
    assert isinstance(decided.action, Escalate)
    assert decided.action.reason is EscalationReason.contract_violation


def test_a_poll_woken_early_by_a_person_still_waits_out_the_last_retry_after() -> None:
    held = NOW + timedelta(seconds=40)
    op = operation(S.observing, remote_job_id="job_1", status_url=JOB, poll_not_before=held)
    wait = before_poll(op, CTX, NOW).action
    assert isinstance(wait, Wait) and wait.until == held
    assert wait.delay_source is DelaySource.provider_retry_after


def test_the_cancel_confirmation_poll_honours_the_last_retry_after() -> None:
    held = NOW + timedelta(seconds=40)
    op = operation(
        S.cancel_requested,
        remote_job_id="job_1",
        status_url=JOB,
        poll_not_before=held,
        cancel_deadline=NOW + timedelta(minutes=5),
    )
    send = before_cancel(op, CTX, NOW).action
    assert isinstance(send, Send) and send.wake_at == held


def test_a_stored_status_url_on_a_foreign_origin_is_never_polled() -> None:
    op = operation(S.observing, remote_job_id="j", status_url="http://169.254.169.254/latest")
    action = before_poll(op, CTX, NOW).action
    assert isinstance(action, Escalate)
    assert action.reason is EscalationReason.contract_violation
    assert "169.254.169.254" in action.detail


def test_an_absurd_retry_after_on_a_create_waits_until_the_create_deadline() -> None:
    op = operation(S.create_pending, create_attempts=1)
    request = before_poll(operation(S.observing, status_url=JOB), CTX, NOW).action.request  # type: ignore[union-attr]
    decided = after_create(op, CTX, request, answer(429, None, retry_after="9" * 400), NOW, 1.0)
    wait = decided.action.wait  # type: ignore[union-attr]
    assert wait.until == op.create_deadline and wait.clipped_to_deadline
