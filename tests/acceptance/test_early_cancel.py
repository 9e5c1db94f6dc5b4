"""A person who says "stop" right after submitting is heard at once: the intent is recorded
whatever the state, and no wake-up is lost while the cancel holds the lease."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import timedelta

import pytest

from jobwarden.config.settings import get_settings
from jobwarden.demo.harness import wait_for
from jobwarden.tasks.humans.interventions import request_cancel
from jobwarden.tasks.runtime import build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from tests.acceptance.conftest import Pipeline

pytestmark = pytest.mark.usefixtures("stack")

NEVER_FINISHES = {"never_finish": True, "cancel": "honour"}


def test_twenty_operations_cancelled_right_after_submission_end_without_a_lost_wake_up(
    pipeline: Pipeline,
) -> None:
    ops = []
    for _ in range(20):
        op = pipeline.submit(NEVER_FINISHES)
        answer = request_cancel(op, "pytest", "changed my mind")
        assert answer in {"abandoned", "cancel_requested", "create_pending", "create_unknown"}
        ops.append(op)
    for op in ops:
        row = pipeline.wait_state(op, timeout=30)
        events = pipeline.events(op)
        kinds = [e.draft.kind.value for e in events]
        assert "cancel_requested" in kinds
        creates = pipeline.creates(op)
        if row.state == "abandoned":
            # Stopped before anything left: nothing exists remotely, nothing was sent.
            assert creates == [] and "create_sent" not in kinds
            continue
        assert row.state == "cancelled", kinds
        assert len(creates) == 1 and len(pipeline.job_requests(op, "cancel")) == 1
        submitted = events[0].draft.at
        sent = next(e.draft.at for e in events if e.draft.kind.value == "create_sent")
        assert sent - submitted < timedelta(seconds=2), (op, sent - submitted)


def test_a_cancel_while_the_create_is_ambiguous_waits_for_reconciliation_then_cancels(
    pipeline: Pipeline,
    arm: Callable[[str, str, str], None],
    fired: Callable[[str, str], int | None],
) -> None:
    key = secrets.token_hex(8)
    # The create's answer is lost (the step crashes), and the reconciliation then stalls
    # past its lease: the cancel arrives while nobody knows whether a remote job exists.
    arm("after_create_response", key, "raise")
    arm("after_reconcile_claim", key, "block:8")
    op = pipeline.submit(NEVER_FINISHES, key=key)
    wait_for(lambda: fired("after_reconcile_claim", key), timeout=20, what="the stall")
    # The stalled step holds the lease; once its TTL passes, a redispatched step may take
    # it and reconcile. A person's cancel waits for the lease at most the intervention
    # wait, then writes fenced without it: a short wait records the cancel while the
    # create is still ambiguous, instead of racing the redispatch for the lease.
    short = get_settings().model_copy(update={"intervention_wait_seconds": 0.5})
    impatient = build_runtime(short)
    try:
        assert request_cancel(op, "pytest", "stop it", runtime=impatient) == "reconciling"
    finally:
        impatient.redis.close()
        close_runtime(impatient)
    row = pipeline.wait_state(op, timeout=40)
    kinds = pipeline.kinds(op)
    assert row.state == "cancelled", kinds
    assert kinds.index("cancel_requested") < kinds.index("reconciled") < kinds.index("cancel_sent")
    assert len(pipeline.remote_jobs(op)) == 1
    assert len(pipeline.job_requests(op, "cancel")) == 1
