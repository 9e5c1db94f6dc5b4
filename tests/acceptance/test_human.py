"""Humans decide what automation must not: approvals and escalation options."""

from __future__ import annotations

import httpx
import pytest

from jobwarden.demo.harness import Stack, wait_for
from jobwarden.models.errors import AnotherApproverNeededError, RefusedInputError
from tests.acceptance.conftest import Pipeline
from tests.api_server import serving


def test_an_exhausted_budget_extended_once_by_a_human_runs_to_success(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.humans.interventions import decide_escalation, escalation_options

    op = pipeline.submit({"polls_to_finish": 5}, max_status_requests=2)
    row = pipeline.wait_state(op)
    assert (row.state, row.escalation_reason) == ("escalated", "request_budget_exhausted")
    assert [o.kind.value for o in escalation_options(op)] == [
        "extend",
        "cancel_at_provider",
        "abandon",
    ]
    assert decide_escalation(op, "extend", "alice", "provider is slow today").state == "observing"
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
    from jobwarden.tasks.humans.interventions import approve

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


def test_a_two_person_contract_sends_one_create_only_after_two_distinct_approvers(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.models.humans.identity import token_author
    from jobwarden.tasks.humans.interventions import approve

    op = pipeline.submit({"polls_to_finish": 1}, provider="sandbox_two_approvers")
    fingerprint = pipeline.row(op).request_fingerprint
    # Two principals count (issue 33): the Python door names them by their tokens' Author.
    bob, carol = token_author("bob"), token_author("carol")
    assert approve(op, fingerprint, bob) == "awaiting_approval"
    with pytest.raises(AnotherApproverNeededError, match="already approved"):
        approve(op, fingerprint, bob)
    # One approval sends nothing: the operation is still waiting, not create_pending.
    assert pipeline.row(op).state == "awaiting_approval" and pipeline.creates(op) == []
    assert approve(op, fingerprint, carol) == "create_pending"
    done = pipeline.wait_state(op)
    assert (done.state, done.authorized_by) == ("succeeded", "token:bob, token:carol")
    assert len(pipeline.creates(op)) == 1 and done.create_attempts == 1
    kinds = [e.draft.kind.value for e in pipeline.events(op)]
    assert kinds.index("approval_recorded") < kinds.index("approved") < kinds.index("create_sent")


def test_an_approval_after_the_create_deadline_would_have_passed_sends_the_create(
    stack: Stack, pipeline: Pipeline
) -> None:
    # The user's story (issue 20): approved after the 3 s create deadline the contract gives,
    # counted from submission; before, the create then failed at once, nothing sent.
    from jobwarden.tasks.humans.interventions import approve
    from jobwarden.tasks.runtime import utcnow

    op = pipeline.submit({"polls_to_finish": 1}, provider="sandbox_approval_short")
    row = pipeline.row(op)
    assert row.state == "awaiting_approval"
    wait_for(
        lambda: utcnow() > row.create_deadline,
        timeout=10,
        what="the create deadline, counted from submission, to pass",
    )
    assert pipeline.row(op).state == "awaiting_approval"  # the wait consumed nothing
    assert approve(op, row.request_fingerprint, "bob") == "create_pending"
    done = pipeline.wait_state(op)
    assert done.state == "succeeded", pipeline.kinds(op)
    assert len(pipeline.creates(op)) == 1 and done.create_attempts == 1
    approved = next(e for e in pipeline.events(op) if e.draft.kind.value == "approved")
    assert approved.draft.excerpt["create_deadline"] == done.create_deadline.isoformat()
    assert done.create_deadline > approved.draft.at


def test_an_unapproved_operation_ends_approval_expired_and_a_late_approval_is_a_409(
    stack: Stack, pipeline: Pipeline, database_url: str
) -> None:
    from jobwarden.api.app import create_app
    from jobwarden.api.auth import Scope, create_token

    op = pipeline.submit({"polls_to_finish": 1}, provider="sandbox_approval_window")
    row = pipeline.row(op)
    assert row.state == "awaiting_approval" and row.next_poll_at is not None
    # Woken by the beat's sweep at the window's end (1 s), ended by a worker's step.
    ended = pipeline.wait_state(op, "approval_expired", timeout=20)
    assert pipeline.creates(op) == [] and ended.authorized_by is None
    last = pipeline.events(op)[-1].draft
    assert (last.from_state, last.to_state) == ("awaiting_approval", "approval_expired")
    assert last.cause == "approval window closed without an approval"
    assert last.actor.startswith("worker:"), last.actor
    bearer = create_token(
        database_url, tenant="acceptance", name="approver", scopes=[Scope.approve]
    ).token
    with serving(create_app()) as url:
        answer = httpx.post(
            f"{url}/v1/operations/{op}/approvals",
            json={"fingerprint": row.request_fingerprint},
            headers={"Authorization": f"Bearer {bearer}"},
            timeout=30,
        )
    assert answer.status_code == 409, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["type"].endswith("/approval_window_closed")
    assert pipeline.row(op).state == "approval_expired"
