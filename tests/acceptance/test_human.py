"""Humans decide what automation must not: approvals and escalation options."""

from __future__ import annotations

import pytest

from jobwarden.harness import Stack
from jobwarden.models.errors import RefusedInputError
from tests.acceptance.conftest import Pipeline


def test_an_exhausted_budget_extended_once_by_a_human_runs_to_success(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.interventions import decide_escalation, escalation_options

    op = pipeline.submit({"polls_to_finish": 5}, max_status_requests=2)
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "request_budget_exhausted")
    assert [o.kind.value for o in escalation_options(op)] == [
        "extend",
        "cancel_at_provider",
        "abandon",
    ]
    assert decide_escalation(op, "extend", "alice", "provider is slow today") == "observing"
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    assert row.max_status_requests == 6 and row.status_requests_used == 5
    decision = next(e for e in pipeline.events(op) if e.draft.kind.value == "human_decision")
    assert decision.draft.actor == "human:alice"
    assert decision.draft.excerpt["new_bounds"]["max_status_requests"] == 6
    assert len(pipeline.job_requests(op, "status")) == 5
    with pytest.raises(RefusedInputError):
        decide_escalation(op, "extend", "alice")


def test_an_operation_needing_approval_sends_nothing_until_its_fingerprint_is_approved(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.interventions import approve

    op = pipeline.submit({"polls_to_finish": 1}, provider="sandbox_approval")
    row = pipeline.row(op)
    assert row.state == "awaiting_approval"
    with pytest.raises(RefusedInputError, match="different fingerprint"):
        approve(op, "0" * 64, "bob")
    assert pipeline.creates(op) == []
    assert approve(op, row.request_fingerprint, "bob") == "create_pending"
    done = pipeline.wait_state(op)
    assert done.state == "succeeded" and done.authorized_by == "bob"
    assert len(pipeline.creates(op)) == 1
