"""Each named fault point armed: a worker killed, or a step failing, right after a commit or
around a provider call still leaves one remote job, one cancel, one result and an honest,
verifiable history (the pipeline fixture verifies every chain afterwards).

A 'kill' SIGKILLs the pool process at the point: its message is redelivered (late acks),
finds the dead worker's lease still alive (it has a TTL), and the sweeper re-sends the
wake-up once the row is overdue. A 'raise' fails the step; the lease is released and the
sweeper retries. Either way the committed row alone decides what happens next.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from jobwarden.demo.harness import Stack, wait_for
from tests.acceptance.conftest import Pipeline

NEVER_FINISHES = {"never_finish": True, "cancel": "honour"}


def _fault(
    point: str,
    action: str,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
    behaviour: dict[str, Any],
    **limits: Any,
) -> tuple[str, Any]:
    """Arm `point` with `action` for a new operation, and return it and its row once the
    fault has fired and the operation has stopped."""
    key = secrets.token_hex(8)
    arm(point, key, action)
    op = pipeline.submit(behaviour, key=key, **limits)
    wait_for(lambda: fired(point, key), timeout=20, what=f"the fault at {point}")
    return op, pipeline.wait_state(op, timeout=40)


def _fault_while_cancelling(
    point: str,
    action: str,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
    **limits: Any,
) -> tuple[str, Any]:
    """As _fault, for a point on the cancel path: cancel a running job, then let it stop."""
    from jobwarden.tasks.humans.interventions import request_cancel

    key = secrets.token_hex(8)
    arm(point, key, action)
    op = pipeline.submit(NEVER_FINISHES, key=key, **limits)
    pipeline.wait_state(op, "observing")
    request_cancel(op, "pytest", "no longer needed")
    wait_for(lambda: fired(point, key), timeout=20, what=f"the fault at {point}")
    return op, pipeline.wait_state(op, timeout=40)


def _at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(entry["time"].replace("Z", "+00:00"))


def _one_remote_job_under_one_token(pipeline: Pipeline, op: str, row: Any) -> list[dict[str, Any]]:
    """Invariant 2, counted by trace id so that a create under a fresh token would show."""
    creates = pipeline.sent_creates(op)
    assert creates
    assert {c["idempotency_key"] for c in creates} == {row.provider_token}
    assert len({c["job_id"] for c in creates}) == 1 == len(pipeline.remote_jobs(op))
    return creates


def _claims(kinds: list[str]) -> int:
    """Committed create claims: every create that leaves the process has one (invariant 1)."""
    return kinds.count("create_sent") + kinds.count("reconcile_sent")


# --- the lease ---------------------------------------------------------------------------


def test_a_worker_killed_holding_the_lease_holds_up_the_operation_only_until_the_lease_expires(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
    redis_client: Any,
) -> None:
    from jobwarden.config.settings import get_settings
    from jobwarden.tasks.leases import lease_key

    key = secrets.token_hex(8)
    arm("after_lease", key, "kill")
    op = pipeline.submit({"polls_to_finish": 1}, key=key)
    wait_for(lambda: fired("after_lease", key), timeout=20, what="the kill after the lease")
    ttl_ms = redis_client.pttl(lease_key(os.environ["JOBWARDEN_KEY_PREFIX"], uuid.UUID(op)))
    expires = time.monotonic() + ttl_ms / 1000
    # The dead worker's lease expires on its own (-1 would mean never: redis-py's default).
    assert 0 < ttl_ms <= get_settings().lease_ttl_seconds * 1000
    row = pipeline.wait_state(op, timeout=30)
    assert row.state == "succeeded"
    creates = _one_remote_job_under_one_token(pipeline, op, row)
    assert len(creates) == 1
    # Nobody acted while the dead owner's lease lived, and the dead owner had committed nothing.
    assert creates[0]["monotonic"] >= expires
    kinds = pipeline.kinds(op)
    assert kinds[:2] == ["intent_recorded", "create_sent"]
    assert "create_ambiguous" not in kinds


# --- create and reconcile ----------------------------------------------------------------


def test_a_worker_killed_between_committing_the_create_and_sending_it_reconciles_with_its_token(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    op, row = _fault(
        "after_create_sent_commit", "kill", pipeline, arm, fired, {"polls_to_finish": 1}
    )
    assert row.state == "succeeded"
    kinds = pipeline.kinds(op)
    # The claim without an outcome is ambiguous: reconciled, never retried under a new token.
    assert kinds[:3] == ["intent_recorded", "create_sent", "create_ambiguous"]
    assert "reconciled" in kinds
    creates = _one_remote_job_under_one_token(pipeline, op, row)
    # The dead worker sent nothing: its claim is the one without a request.
    assert len(creates) == 1 == _claims(kinds) - 1


def test_a_worker_killed_right_after_committing_the_accepted_job_never_sends_a_second_create(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
    redis_client: Any,
) -> None:
    from jobwarden.tasks.leases import lease_key
    from jobwarden.tasks.pipeline import create

    key = secrets.token_hex(8)
    arm("after_accept_commit", key, "kill")
    op = pipeline.submit({"polls_to_finish": 1}, key=key)
    wait_for(lambda: fired("after_accept_commit", key), timeout=20, what="the kill after accept")
    # The redelivered create meets the dead worker's lease; a late duplicate sent once that
    # lease has expired (before the sweeper's next round) must find the accepted row and stop.
    lease = lease_key(os.environ["JOBWARDEN_KEY_PREFIX"], uuid.UUID(op))
    wait_for(lambda: not redis_client.exists(lease), timeout=10, what="the dead lease to expire")
    create.apply_async(args=[op], queue=os.environ["JOBWARDEN_QUEUE"])
    row = pipeline.wait_state(op, timeout=30)
    assert row.state == "succeeded"
    creates = _one_remote_job_under_one_token(pipeline, op, row)
    assert len(creates) == 1
    kinds = pipeline.kinds(op)
    # The accept was committed before the crash: nothing ambiguous, nothing to reconcile.
    assert kinds[:3] == ["intent_recorded", "create_sent", "create_accepted"]
    assert "create_ambiguous" not in kinds and "reconcile_sent" not in kinds
    # The accept's commit reserved the first status request; the kill lost its wake-up, so
    # the sweeper's redispatch retired that reservation (counted, unused) and the poll
    # claimed a fresh one: one request sent, never one uncounted.
    assert len(pipeline.job_requests(op, "status")) == 1
    assert row.status_requests_used == 2


def test_a_worker_killed_after_claiming_a_reconcile_attempt_still_finds_the_one_remote_job(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    op, row = _fault(
        "after_reconcile_claim",
        "kill",
        pipeline,
        arm,
        fired,
        {"create_response": "drop", "polls_to_finish": 1},
    )
    assert row.state == "succeeded"
    kinds = pipeline.kinds(op)
    assert kinds.count("reconcile_sent") == 2 and kinds.count("reconciled") == 1
    creates = _one_remote_job_under_one_token(pipeline, op, row)
    # The dropped create and one replay; the dead worker's claim never left the process.
    assert [c["replayed"] for c in creates] == [False, True]
    assert len(creates) == _claims(kinds) - 1


def test_a_worker_killed_after_a_reconcile_answer_reconciles_again_with_the_same_token(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    op, row = _fault(
        "after_reconcile_response",
        "kill",
        pipeline,
        arm,
        fired,
        {"create_response": "drop", "polls_to_finish": 1},
    )
    assert row.state == "succeeded"
    kinds = pipeline.kinds(op)
    # The answer the dead worker got was never recorded: a second attempt asks again.
    assert kinds.count("reconcile_sent") == 2 and kinds.count("reconciled") == 1
    creates = _one_remote_job_under_one_token(pipeline, op, row)
    assert [c["replayed"] for c in creates] == [False, True, True]
    assert len(creates) == _claims(kinds)


# --- polling -----------------------------------------------------------------------------


def test_a_worker_killed_after_reserving_a_status_request_leaves_it_counted_and_unused(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    op, row = _fault("after_poll_claim", "kill", pipeline, arm, fired, {"polls_to_finish": 2})
    assert row.state == "succeeded"
    statuses = pipeline.job_requests(op, "status")
    assert len(statuses) == 2
    # Invariant 3: the crash left unused reserve, never an invisible extra request. The
    # killed poll had marked its reserved request as spent; the redelivered one claimed a
    # fresh request instead, and says why.
    assert row.status_requests_used == len(statuses) + 1
    events = [e.draft for e in pipeline.events(op)]
    reserved = [
        d.excerpt["reserved_request"] for d in events if "reserved_request" in (d.excerpt or {})
    ]
    claims = [d for d in events if d.kind.value == "poll_sent"]
    assert reserved[0] == 1 and [c.excerpt["request"] for c in claims] == [2]
    answered = [
        (d.excerpt or {}).get("request") for d in events if d.kind.value in ("polled", "observed")
    ]
    assert 1 not in answered  # the history shows the first reservation unspent


# --- cancelling --------------------------------------------------------------------------


def test_a_worker_killed_between_claiming_the_cancel_and_sending_it_never_claims_cancelled(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    op, row = _fault_while_cancelling(
        "after_cancel_claim", "kill", pipeline, arm, fired, cancel_deadline_seconds=8
    )
    # The claim cannot tell whether the cancel left, so it is not sent again (at most once);
    # the provider never heard it, the job runs on, and nobody says `cancelled`.
    assert row.state == "cancellation_unconfirmed"
    assert row.escalation_reason == "cancellation_unconfirmed"
    assert pipeline.job_requests(op, "cancel") == []
    remote = pipeline.remote_jobs(op)[0]
    assert remote["cancel_requested"] is False and remote["status"] == "running"
    events = pipeline.events(op)
    kinds = [e.draft.kind.value for e in events]
    assert kinds.count("cancel_requested") == kinds.count("cancel_sent") == 1
    assert "cancel_confirmed" not in kinds
    assert all(e.draft.to_state != "cancelled" for e in events)
    # Confirmation reads went on after the kill, until the cancel deadline stopped them:
    # each claimed (its `poll_sent`, committed before it leaves) before the deadline. The
    # sandbox stamps arrivals, which a loaded machine may put a moment after their claim
    # (seen once: a read claimed before the deadline arrived after it).
    claimed = next(e.draft.at for e in events if e.draft.kind.value == "cancel_sent")
    confirming = [r for r in pipeline.job_requests(op, "status") if _at(r) > claimed]
    assert confirming
    sent = [
        e.draft.at for e in events if e.draft.kind.value == "poll_sent" and e.draft.at > claimed
    ]
    assert all(at < row.cancel_deadline for at in sent), (sent, row.cancel_deadline)
    assert all(_at(r) < row.cancel_deadline + timedelta(seconds=2) for r in confirming)


def test_a_lost_cancel_answer_is_not_resent_and_the_provider_confirms_the_cancel(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    op, row = _fault_while_cancelling("after_cancel_response", "raise", pipeline, arm, fired)
    assert row.state == "cancelled"
    cancels = pipeline.job_requests(op, "cancel")
    assert len(cancels) == 1 and cancels[0]["status"] == 202
    assert pipeline.remote_jobs(op)[0]["status"] == "cancelled"
    events = pipeline.events(op)
    kinds = [e.draft.kind.value for e in events]
    assert kinds.count("cancel_sent") == 1
    assert kinds[-1] == "cancel_confirmed"
    sent = kinds.index("cancel_sent")
    # The 202 was lost with the failed step; only a later status read confirmed the cancel.
    assert all(e.draft.http_status != 202 for e in events[sent + 1 :])
    assert [r for r in pipeline.job_requests(op, "status") if r["seq"] > cancels[0]["seq"]]


# --- collecting --------------------------------------------------------------------------


def _collected_once(pipeline: Pipeline, op: str, row: Any, items: int) -> list[str]:
    assert row.state == "succeeded"
    assert row.validation_summary["valid"] is True
    assert row.validation_summary["record_count"] == items
    stored = pipeline.stored_results(op)
    assert len(stored) == 1
    content, sha256, record_count = stored[0]
    assert hashlib.sha256(content).hexdigest() == sha256 == row.validation_summary["sha256"]
    assert record_count == items
    kinds = pipeline.kinds(op)
    assert kinds.count("result_collected") == 1 and kinds[-1] == "result_collected"
    return kinds


def test_a_worker_killed_after_claiming_the_result_fetch_collects_the_result_once(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    op, row = _fault(
        "after_collect_claim",
        "kill",
        pipeline,
        arm,
        fired,
        {"polls_to_finish": 1, "result_items": 7},
    )
    kinds = _collected_once(pipeline, op, row, 7)
    # Two claims, one download: the dead worker's fetch never left the process.
    assert kinds.count("result_fetch_sent") == 2
    assert len(pipeline.job_requests(op, "result")) == 1


def test_a_lost_result_download_is_fetched_again_and_collected_once(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    op, row = _fault(
        "after_collect_response",
        "raise",
        pipeline,
        arm,
        fired,
        {"polls_to_finish": 1, "result_items": 7},
    )
    kinds = _collected_once(pipeline, op, row, 7)
    # A GET is safe to repeat: the unrecorded download is fetched again, stored once.
    assert kinds.count("result_fetch_sent") == 2
    assert len(pipeline.job_requests(op, "result")) == 2
