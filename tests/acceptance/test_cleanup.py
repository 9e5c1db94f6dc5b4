"""Cleaning up after a job that ended leaving resources (issue 21, ``[cleanup]``), with real
workers, beat and the sandbox provider.

The sandbox's ``leaves_resources`` models ARM RPC "Delete Resource Asynchronously" and
RPC-Delete-V1-01: a DELETE of the resources answers 204 when they are removed at once,
202 (with a Location) when they are removed in the background, and a GET of a deleted
resource answers 404; ``refuse`` answers 409 every time. The call is sent once, its
confirmation awaited like a cancel's, and the operation ends as the job ended.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from jobwarden.demo.harness import Stack, wait_for
from tests.acceptance.conftest import Pipeline

CLEANUP = "sandbox_cleanup"


def _moves(pipeline: Pipeline, op: str) -> list[str]:
    return [e.draft.to_state for e in pipeline.events(op) if e.draft.to_state]


def test_a_failed_job_that_left_resources_is_cleaned_up_once_then_ends_failed(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit(
        {"polls_to_finish": 1, "outcome": "failed", "leaves_resources": "async"},
        provider=CLEANUP,
    )
    row = pipeline.wait_state(op)
    assert row.state == "failed", pipeline.kinds(op)
    assert row.ended_as == "failed"
    assert _moves(pipeline, op)[-3:] == ["cleanup_pending", "cleaning_up", "failed"]
    # One DELETE, answered 202; the checks read 200 "deleting" twice, then 404: gone.
    deletes = pipeline.job_requests(op, "cleanup")
    assert [r["status"] for r in deletes] == [202]
    checks = pipeline.job_requests(op, "resources")
    assert [r["status"] for r in checks] == [200, 200, 404]
    assert pipeline.remote_jobs(op)[0]["resources"] == "gone"
    kinds = pipeline.kinds(op)
    assert kinds.count("cleanup_sent") == 1 and kinds[-1] == "cleanup_confirmed"
    # The checks were counted against the status budget, as a cancel's confirmations are.
    assert kinds.count("cleanup_check_sent") == 3


def test_a_cancelled_job_whose_resources_go_at_once_ends_cancelled_after_one_delete(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.humans.interventions import request_cancel

    op = pipeline.submit({"never_finish": True, "leaves_resources": "sync"}, provider=CLEANUP)
    pipeline.wait_state(op, "observing")
    request_cancel(op, "pytest", "the deployment is no longer needed")
    row = pipeline.wait_state(op)
    assert row.state == "cancelled", pipeline.kinds(op)
    assert _moves(pipeline, op)[-4:] == [
        "cancelling",
        "cleanup_pending",
        "cleaning_up",
        "cancelled",
    ]
    # ARM: a synchronous DELETE answers 204; nothing is left to check.
    assert [r["status"] for r in pipeline.job_requests(op, "cleanup")] == [204]
    assert pipeline.job_requests(op, "resources") == []
    last = pipeline.events(op)[-1].draft
    assert last.kind.value == "cleanup_confirmed" and "HTTP 204" in (last.cause or "")


def test_a_cleanup_nobody_confirms_stops_for_a_person_and_is_never_resent_by_automation(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.humans.interventions import decide_escalation, escalation_options

    op = pipeline.submit(
        {"polls_to_finish": 1, "outcome": "failed", "leaves_resources": "refuse"},
        provider="sandbox_cleanup_short",
    )
    row = pipeline.wait_state(op, timeout=40)
    assert row.state == "cleanup_unconfirmed", pipeline.kinds(op)
    assert row.escalation_reason == "deadline_exceeded"
    assert "ended failed" in row.escalation_detail
    # Called once: a 409 is not retried; the checks found the resources still there.
    assert [r["status"] for r in pipeline.job_requests(op, "cleanup")] == [409]
    assert {r["status"] for r in pipeline.job_requests(op, "resources")} == {200}
    offered = [o.kind.value for o in escalation_options(op)]
    assert offered == ["recheck_cleanup", "retry_cleanup", "abandon"]
    # A person's retry is one more call, claimed as the first was.
    decide_escalation(op, "retry_cleanup", "ops:ana", "the lock was released by hand")
    row = pipeline.wait_state(op, timeout=40)
    assert row.state == "cleanup_unconfirmed"
    assert [r["status"] for r in pipeline.job_requests(op, "cleanup")] == [409, 409]
    decide_escalation(op, "abandon", "ops:ana", "left for the platform team")
    assert pipeline.wait_state(op).state == "abandoned"
    assert pipeline.row(op).ended_as == "failed"  # how the job ended stays on record


def test_a_worker_killed_after_claiming_the_cleanup_never_sends_it_and_says_so(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    key = secrets.token_hex(8)
    arm("after_cleanup_claim", key, "kill")
    behaviour: dict[str, Any] = {
        "polls_to_finish": 1,
        "outcome": "failed",
        "leaves_resources": "async",
    }
    op = pipeline.submit(behaviour, key=key, provider=CLEANUP)
    wait_for(lambda: fired("after_cleanup_claim", key), timeout=20, what="the cleanup claim")
    row = pipeline.wait_state(op, timeout=40)
    # The claim cannot tell whether the call left, so it is not sent again (at most once);
    # the checks find the resources still there until the deadline stops them.
    assert row.state == "cleanup_unconfirmed", pipeline.kinds(op)
    assert pipeline.job_requests(op, "cleanup") == []
    assert pipeline.job_requests(op, "resources")
    assert pipeline.remote_jobs(op)[0]["resources"] == "present"
    assert pipeline.kinds(op).count("cleanup_sent") == 1


def test_a_lost_cleanup_answer_is_not_resent_and_the_checks_confirm_it(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    key = secrets.token_hex(8)
    arm("after_cleanup_response", key, "raise")
    behaviour: dict[str, Any] = {
        "polls_to_finish": 1,
        "outcome": "failed",
        "leaves_resources": "async",
    }
    op = pipeline.submit(behaviour, key=key, provider=CLEANUP)
    wait_for(lambda: fired("after_cleanup_response", key), timeout=20, what="the lost answer")
    row = pipeline.wait_state(op, timeout=40)
    assert row.state == "failed", pipeline.kinds(op)
    assert [r["status"] for r in pipeline.job_requests(op, "cleanup")] == [202]
    assert pipeline.job_requests(op, "resources")[-1]["status"] == 404
    assert pipeline.kinds(op)[-1] == "cleanup_confirmed"
