"""Creating remote jobs exactly once: lost responses, concurrent and conflicting submissions."""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor

from jobwarden.demo.harness import Stack
from tests.acceptance.conftest import Pipeline


def test_happy_path_succeeds_only_after_the_result_is_collected_and_validated(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"polls_to_finish": 4, "result_items": 20})
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    kinds = pipeline.kinds(op)
    assert kinds.index("result_collected") > kinds.index("result_fetch_sent")
    assert kinds[-1] == "result_collected"
    assert row.validation_summary["valid"] is True
    assert row.validation_summary["record_count"] == 20
    progress = [
        e.draft.excerpt.get("progress")
        for e in pipeline.events(op)
        if e.draft.kind.value in ("observed", "polled")
    ]
    assert any(p is not None and 0 < p < 100 for p in progress)
    assert len(pipeline.remote_jobs(op)) == 1
    assert row.authorized_by == "pytest"
    statuses = pipeline.job_requests(op, "status")
    assert len(statuses) == row.status_requests_used == 4
    assert [r["kind"] for r in pipeline.job_requests(op, "result")] == ["result"]
    assert all(
        r["traceparent"] and row.trace_id in r["traceparent"]
        for r in pipeline.creates(op) + statuses
    )


def test_lost_create_response_is_reconciled_with_the_same_token(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"create_response": "drop", "polls_to_finish": 2})
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    kinds = pipeline.kinds(op)
    assert "create_ambiguous" in kinds and "reconciled" in kinds
    states = [e.draft.to_state for e in pipeline.events(op) if e.draft.to_state]
    assert "create_unknown" in states and "reconciling" in states
    creates = pipeline.creates(op)
    assert len(creates) >= 2
    assert {c["idempotency_key"] for c in creates} == {row.provider_token}
    assert len(pipeline.remote_jobs(op)) == 1


def test_create_response_held_past_the_client_timeout_is_reconciled(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"create_response": "hold", "hold_seconds": 3, "polls_to_finish": 1})
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    assert "create_ambiguous" in pipeline.kinds(op)
    assert len(pipeline.remote_jobs(op)) == 1


def test_twenty_concurrent_submissions_with_one_key_make_one_operation_and_one_remote_job(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.intake import submit_operation

    key = secrets.token_hex(8)
    command = {"kind": "export", "behaviour": {"polls_to_finish": 1}}

    def one(_: int) -> tuple[str, str | None]:
        r = submit_operation(
            tenant="acceptance",
            provider="sandbox",
            idempotency_key=key,
            command=command,
            requested_by="pytest",
        )
        return r.outcome.value, r.operation_id

    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(one, range(20)))
    outcomes = sorted(a for a, _ in answers)
    assert outcomes == ["created"] + ["replayed"] * 19
    op_ids = {op for _, op in answers}
    assert len(op_ids) == 1
    op = op_ids.pop()
    assert op is not None
    pipeline.created.append(op)
    assert pipeline.wait_state(op).state == "succeeded"
    assert len(pipeline.remote_jobs(op)) == 1
    assert len(pipeline.creates(op)) == 1


def test_same_key_with_a_changed_payload_is_a_conflict_and_touches_nothing(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.intake import submit_operation

    key = secrets.token_hex(8)
    op = pipeline.submit({"polls_to_finish": 1}, key=key)
    before = pipeline.wait_state(op)
    requests_before = len(pipeline.sandbox.requests())
    answer = submit_operation(
        tenant="acceptance",
        provider="sandbox",
        idempotency_key=key,
        command={"kind": "export", "behaviour": {"polls_to_finish": 9}},
        requested_by="pytest",
    )
    assert answer.outcome.value == "conflict"
    assert answer.operation_id == op
    after = pipeline.row(op)
    assert (after.version, after.request_fingerprint, after.command) == (
        before.version,
        before.request_fingerprint,
        before.command,
    )
    assert len(pipeline.sandbox.requests()) == requests_before


def test_lost_create_response_is_reconciled_by_looking_the_token_up(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit(
        {"create_response": "drop", "polls_to_finish": 1}, provider="sandbox_lookup"
    )
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    lookups = [
        r
        for r in pipeline.sandbox.requests()
        if r["kind"] == "lookup" and row.provider_token in (r.get("query") or "")
    ]
    assert len(lookups) == 1
    assert len(pipeline.creates(op)) == 1
    assert len(pipeline.remote_jobs(op)) == 1
    assert "reconciled" in pipeline.kinds(op)


def test_without_a_reconciliation_path_an_ambiguous_create_escalates_and_is_not_resent(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"create_response": "drop"}, provider="sandbox_noreconcile")
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "unknown_state")
    assert "at-most-once cannot be proven" in row.escalation_detail
    assert len(pipeline.creates(op)) == 1
