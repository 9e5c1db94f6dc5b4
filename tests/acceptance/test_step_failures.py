"""A step that keeps crashing is counted on the row and stops after three crashes with
internal_error, instead of being retried by the sweeper without bound."""

from __future__ import annotations

import secrets
from collections.abc import Callable

import pytest

from jobwarden.demo.harness import wait_for
from tests.acceptance.conftest import Pipeline

pytestmark = pytest.mark.usefixtures("stack")

SLOW = {"progress": False, "never_finish": True}


def test_a_step_that_crashes_three_times_stops_with_internal_error_and_a_bounded_count(
    pipeline: Pipeline,
    arm: Callable[[str, str, str], None],
    fired: Callable[[str, str], int | None],
) -> None:
    key = secrets.token_hex(8)
    op = pipeline.submit(SLOW, key=key)
    pipeline.wait_state(op, "observing")
    for crash in range(1, 4):
        arm("after_poll_response", key, "raise")

        def counted(n: int = crash) -> bool:
            return bool(pipeline.row(op).step_failures == n)

        wait_for(counted, timeout=30, what=f"crash {crash} counted")
    row = pipeline.wait_state(op, "escalated", timeout=20)
    assert row.escalation_reason == "internal_error"
    assert "InjectedFaultError" in (row.escalation_detail or "")
    crashes = [e for e in pipeline.events(op) if "crashed" in (e.draft.cause or "")]
    assert [e.draft.cause.split(";")[-1].strip() for e in crashes[:2]] == ["1 of 3", "2 of 3"]
    # Nothing polls a stopped operation: the status requests end with the third crash.
    sent = len(pipeline.job_requests(op, "status"))
    assert pipeline.row(op).status_requests_used == sent


def test_a_crash_after_the_create_was_claimed_goes_to_reconciliation_not_a_blind_resend(
    pipeline: Pipeline,
    arm: Callable[[str, str, str], None],
    fired: Callable[[str, str], int | None],
) -> None:
    key = secrets.token_hex(8)
    arm("after_create_response", key, "raise")
    op = pipeline.submit({"progress": False}, key=key)
    wait_for(lambda: fired("after_create_response", key), timeout=20, what="the crash")
    row = pipeline.wait_state(op, "succeeded", timeout=40)
    kinds = pipeline.kinds(op)
    assert "create_ambiguous" in kinds and "reconcile_sent" in kinds
    assert row.step_failures == 1
    assert len(pipeline.remote_jobs(op)) == 1
