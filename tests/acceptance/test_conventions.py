"""Public provider conventions end to end, each test named after the convention it models
(issue 8's findings): real workers and beat against the sandbox."""

from __future__ import annotations

import uuid
from email.utils import parsedate_to_datetime

import pytest

from tests.acceptance.conftest import Pipeline

pytestmark = pytest.mark.usefixtures("stack")


def _first(pipeline: Pipeline, op: str, kind: str) -> object:
    return next(e for e in pipeline.events(op) if e.draft.kind.value == kind)


def test_azure_lro_retry_after_on_the_202_sets_the_first_poll(pipeline: Pipeline) -> None:
    # Azure REST guidelines: the 202 on create carries Retry-After for the first poll.
    op = pipeline.submit({"create_retry_after": 2, "polls_to_finish": 1})
    row = pipeline.wait_state(op, timeout=30)
    assert row.state == "succeeded"
    # The first request was reserved by the accept's commit; the sandbox log says when it left.
    (first_poll, *_) = pipeline.job_requests(op, "status")
    created = pipeline.job_requests(op, "create")[-1]
    waited = first_poll["monotonic"] - created["monotonic"]
    assert waited >= 2.0
    wait = next(
        e for e in pipeline.events(op) if e.draft.kind.value == "decision" and e.draft.delay_source
    )
    assert (wait.draft.cause, wait.draft.delay_source) == ("first_poll", "provider_retry_after")


def test_idempotency_key_draft_409_in_flight_is_retried_with_the_same_token(
    pipeline: Pipeline,
) -> None:
    # IETF Idempotency-Key draft: a repeat while the first request is still processed is
    # 409; the client retries the same key later. The first create is held past our
    # request timeout (2 s), so the same-token reconciliation meets the 409.
    op = pipeline.submit(
        {"create_response": "hold", "hold_seconds": 3, "in_flight_seconds": 4, "polls_to_finish": 1}
    )
    row = pipeline.wait_state(op, timeout=40)
    assert row.state == "succeeded", pipeline.kinds(op)
    causes = [e.draft.cause or "" for e in pipeline.events(op)]
    assert any("still processing our token" in c for c in causes)
    creates = pipeline.creates(op)
    assert {c["idempotency_key"] for c in creates} == {row.provider_token}
    assert any(c["status"] == 409 for c in creates)
    assert len(pipeline.remote_jobs(op)) == 1


def test_oasis_repeatable_requests_send_a_guid_and_the_same_first_sent_on_every_retry(
    pipeline: Pipeline,
) -> None:
    # OASIS Repeatable Requests 1.0 (Azure): GUID Repeatability-Request-ID with an
    # IMF-fixdate Repeatability-First-Sent, identical on the retry after a lost answer.
    op = pipeline.submit(
        {"require_repeatability": True, "create_response": "drop", "polls_to_finish": 1},
        provider="sandbox_conventions",
    )
    row = pipeline.wait_state(op, timeout=40)
    assert row.state == "succeeded", pipeline.kinds(op)
    assert uuid.UUID(row.provider_token).version == 4
    creates = pipeline.creates(op)
    assert len(creates) >= 2
    sent = {c["first_sent"] for c in creates}
    assert len(sent) == 1
    (first,) = sent
    assert first.endswith("GMT") and parsedate_to_datetime(first) is not None
    assert len(pipeline.remote_jobs(op)) == 1


def test_azure_operation_timed_out_ends_expired_not_failed(pipeline: Pipeline) -> None:
    # Azure reports an operation that ran out of time as Failed + error.code OperationTimedOut.
    op = pipeline.submit(
        {"outcome": "failed", "error_code": "OperationTimedOut", "polls_to_finish": 1},
        provider="sandbox_conventions",
    )
    assert pipeline.wait_state(op, timeout=30).state == "expired"


def test_a_synchronous_create_answer_is_collected_without_a_status_read(
    pipeline: Pipeline,
) -> None:
    op = pipeline.submit({"synchronous": True})
    row = pipeline.wait_state(op, timeout=30)
    assert row.state == "succeeded", pipeline.kinds(op)
    assert pipeline.job_requests(op, "status") == []
    causes = [e.draft.cause or "" for e in pipeline.events(op)]
    assert any("synchronous outcome" in c for c in causes)
