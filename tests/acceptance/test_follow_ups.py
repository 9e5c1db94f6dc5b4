"""Follow-up operations (issue 40) with real workers and the sandbox over HTTP: a payment
intent, its capture and three partial refunds, each its own operation and remote job; a
fourth refund over what the capture took is refused naming what remains. A deploy whose
health checks fail validation is rolled back by its contract's rule: two operations, two
histories, linked both ways, the rollback started (and recorded) as the rule, waiting for
its own approval.
"""

from __future__ import annotations

import json
import uuid

import pytest

import jobwarden
from jobwarden.demo.harness import Stack, wait_for
from jobwarden.models.intake.follow_ups import AmountLimitError
from jobwarden.tasks.intake import SubmitOutcome
from tests.acceptance.conftest import Pipeline

HEAD = "1" * 40
PREVIOUS = "2" * 40


def _started(pipeline: Pipeline, answer: jobwarden.FollowUpResult) -> str:
    assert answer.outcome is SubmitOutcome.created, answer
    assert answer.operation_id is not None
    pipeline.created.append(answer.operation_id)
    return answer.operation_id


def test_a_payment_is_captured_and_refunded_three_times_and_the_fourth_refund_is_refused(
    stack: Stack, pipeline: Pipeline
) -> None:
    money = {"amount": 1000, "currency": "EUR", "behaviour": {"polls_to_finish": 1}}
    intent = pipeline.submit(
        provider="sandbox_payments", command={"kind": "payment_intent", **money}
    )
    assert pipeline.wait_state(intent).state == "succeeded"
    capture = _started(
        pipeline, jobwarden.follow_up(intent, "capture", {"kind": "capture", **money}, "alice")
    )
    assert pipeline.wait_state(capture).state == "succeeded"
    # The provider's own capture object says what it took: the refunds' limit.
    ((content, _, _),) = pipeline.stored_results(capture)
    assert json.loads(content)["amount"] == 1000
    refunds = []
    for n, amount in enumerate((300, 250, 400), start=1):
        refund = {"kind": "refund", "amount": amount, "currency": "EUR"}
        refund["behaviour"] = {"polls_to_finish": 1}
        answer = jobwarden.follow_up(capture, "refund", refund, "alice", instruction_id=f"r{n}")
        refunds.append(_started(pipeline, answer))
    for refund_id in refunds:
        assert pipeline.wait_state(refund_id).state == "succeeded"
    # Each is an operation and a remote job of its own, under its own token.
    rows = [pipeline.row(op) for op in (intent, capture, *refunds)]
    assert len({r.provider_token for r in rows}) == 5
    assert len({r.remote_job_id for r in rows}) == 5
    assert all(len(pipeline.creates(op)) == 1 for op in (intent, capture, *refunds))
    assert [pipeline.row(r).follows for r in refunds] == [uuid.UUID(capture)] * 3
    with pytest.raises(AmountLimitError) as refused:
        jobwarden.follow_up(
            capture,
            "refund",
            {"kind": "refund", "amount": 60, "currency": "EUR"},
            "alice",
            instruction_id="r4",
        )
    assert refused.value.remaining == 50
    assert "remaining 50" in str(refused.value)
    # Nothing was recorded for it, so nothing can be sent: no fourth refund operation.
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import transaction

    with transaction(pipeline.database_url) as session:
        assert store.find_by_key(session, "acceptance", f"follow-up:{capture}:refund:r4") is None
    family = [
        e.draft for e in pipeline.events(capture) if e.draft.kind.value == "follow_up_started"
    ]
    assert [e.excerpt["follow_up"] for e in family] == refunds
    assert [e.excerpt["amount"] for e in family] == [300, 250, 400]


def test_a_deploy_that_fails_validation_is_rolled_back_by_its_rule_as_an_operation_of_its_own(
    stack: Stack, pipeline: Pipeline
) -> None:
    # 3 of 4 health checks failed: past the contract's max_failed_fraction of 0.5.
    health = {"polls_to_finish": 1, "result_items": 4, "result_failed_items": 3}
    deploy = pipeline.submit(
        provider="sandbox_deploy",
        command={
            "kind": "deploy",
            "service": "payments-api",
            "ref": HEAD,
            "previous_ref": PREVIOUS,
            "behaviour": health,
        },
    )
    assert pipeline.wait_state(deploy).state == "result_validation_failed"

    def rollback_started() -> str:
        for event in pipeline.events(deploy):
            if event.draft.kind.value == "follow_up_started":
                return str(event.draft.excerpt["follow_up"])
        return ""

    rollback: str = wait_for(rollback_started, timeout=30, what="the rollback rule's start")
    pipeline.created.append(rollback)
    # Its own operation, waiting for its own approval, started by the rule, never a person.
    row = pipeline.wait_state(rollback, "awaiting_approval")
    assert (row.follows, row.follow_up_kind) == (uuid.UUID(deploy), "rollback")
    assert row.provider == "sandbox_rollback"
    assert row.requested_by == "rule:rollback"
    assert dict(row.command) == {"kind": "rollback", "service": "payments-api", "ref": PREVIOUS}
    (intent, *_) = pipeline.events(rollback)
    assert intent.draft.actor == "rule:rollback"
    assert intent.draft.excerpt["follows"] == deploy
    assert intent.draft.excerpt["started_by_rule"] == "rule:rollback"
    (linked,) = [e for e in pipeline.events(deploy) if e.draft.kind.value == "follow_up_started"]
    assert linked.draft.actor == "rule:rollback"
    assert linked.draft.excerpt["started_by_rule"] == "rule:rollback"
    # A person approves exactly what will be sent, and the rollback runs to its end.
    from jobwarden.tasks.humans.interventions import approve

    assert approve(rollback, row.request_fingerprint, "carol") == "create_pending"
    assert pipeline.wait_state(rollback).state == "succeeded"
    ((content, _, _),) = pipeline.stored_results(rollback)
    assert json.loads(content)["deployed_ref"] == PREVIOUS
    # Two operations, two histories: each verifies on its own.
    assert pipeline.row(deploy).state == "result_validation_failed"
    assert len(pipeline.creates(deploy)) == 1 and len(pipeline.creates(rollback)) == 1
