"""Faults the design names: killed workers, duplicate messages, racing owners,
two beats, parked waits, a broker that is down at submit time."""

from __future__ import annotations

import itertools
import json
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from jobwarden.demo.harness import REPO, Stack, wait_for
from tests.acceptance.conftest import Pipeline, logged


def _gaps(requests: list[dict[str, Any]]) -> list[float]:
    times = [r["monotonic"] for r in requests]
    return [b - a for a, b in itertools.pairwise(times)]


def _kill_worker_at(
    point: str,
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
    check_held: Callable[[str], None],
) -> tuple[str, Any]:
    """Stall the worker that reaches `point` for a new operation, SIGKILL that whole worker,
    and return the operation and its row once the rest of the stack has finished it."""
    key = secrets.token_hex(8)
    arm(point, key, "block:60")
    op = pipeline.submit({"polls_to_finish": 2}, key=key)
    pid = wait_for(lambda: fired(point, key), timeout=20, what=f"a worker stalled at {point}")
    assert pid is not None
    check_held(op)
    killed = stack.kill_worker_of(pid)
    try:
        row = pipeline.wait_state(op, timeout=40)
    finally:
        stack.start_worker(killed)
        stack.wait_ready(killed)
    return op, row


def test_worker_killed_after_sending_the_create_is_finished_by_another_with_one_remote_job(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    def created_once(op: str) -> None:
        assert len({c["job_id"] for c in pipeline.sent_creates(op)}) == 1

    op, row = _kill_worker_at("after_create_response", stack, pipeline, arm, fired, created_once)
    assert row.state == "succeeded"
    kinds = pipeline.kinds(op)
    # The dead worker's create_sent had no recorded outcome: treated as ambiguous.
    assert kinds[:3] == ["intent_recorded", "create_sent", "create_ambiguous"]
    assert "reconciled" in kinds
    # Found by trace id, not by token: a create under a fresh token would be counted here.
    creates = pipeline.sent_creates(op)
    assert len(creates) >= 2
    assert {c["idempotency_key"] for c in creates} == {row.provider_token}
    assert len({c["job_id"] for c in creates}) == 1 == len(pipeline.remote_jobs(op))


def test_worker_killed_after_storing_the_job_id_is_resumed_by_the_sweeper(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    held: list[Any] = []

    def accepted(op: str) -> None:
        held.append(pipeline.row(op))
        assert held[0].state == "accepted" and held[0].remote_job_id

    op, row = _kill_worker_at("before_schedule", stack, pipeline, arm, fired, accepted)
    assert row.state == "succeeded"
    assert len(pipeline.creates(op)) == 1
    assert len(pipeline.remote_jobs(op)) == 1
    first_poll = pipeline.job_requests(op, "status")[0]
    # Nobody scheduled the poll; the sweeper found the row overdue.
    from jobwarden.config.settings import get_settings

    overdue = timedelta(seconds=get_settings().redispatch_after_seconds)
    sent_at = datetime.fromisoformat(first_poll["time"].replace("Z", "+00:00"))
    assert sent_at >= held[0].next_poll_at + overdue


def test_duplicate_poll_messages_and_racing_workers_send_one_status_request_per_due_poll(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.pipeline import poll

    op = pipeline.submit({"polls_to_finish": 6, "retry_after": 1})
    pipeline.wait_state(op, "observing")
    for _ in range(3):
        wait_for(lambda: len(pipeline.job_requests(op, "status")) >= 1, timeout=10)
        for _ in range(10):
            poll.apply_async(args=[op], queue=os.environ["JOBWARDEN_QUEUE"])
        seen = len(pipeline.job_requests(op, "status"))

        def moved_on(seen: int = seen) -> bool:
            return (
                len(pipeline.job_requests(op, "status")) > seen
                or pipeline.row(op).state != "observing"
            )

        wait_for(moved_on, timeout=10)
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    statuses = pipeline.job_requests(op, "status")
    assert len(statuses) == 6 == row.status_requests_used
    assert all(g >= 1.0 - 0.05 for g in _gaps(statuses)), _gaps(statuses)
    # Each request on the record once: claimed by a poll_sent or carried by its answer.
    assert pipeline.recorded_status_requests(op) == [1, 2, 3, 4, 5, 6]


def test_two_beat_schedulers_at_once_send_one_status_request_per_due_poll(
    stack: Stack, pipeline: Pipeline
) -> None:
    second = stack.start_beat("beat-2")
    try:
        ops = [pipeline.submit({"polls_to_finish": 4, "retry_after": 1}) for _ in range(3)]
        rows = [pipeline.wait_state(op) for op in ops]
    finally:
        second.terminate()
        second.wait(timeout=10)
        stack.beats.remove(second)
    for op, row in zip(ops, rows, strict=True):
        assert row.state == "succeeded"
        statuses = pipeline.job_requests(op, "status")
        assert len(statuses) == 4
        assert all(g >= 1.0 - 0.05 for g in _gaps(statuses))
        assert len(pipeline.creates(op)) == 1


def test_a_stale_owner_whose_lease_expired_mid_call_has_its_late_write_refused(
    stack: Stack,
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    from jobwarden.config.settings import get_settings

    key = secrets.token_hex(8)
    lease = get_settings().lease_ttl_seconds
    arm("after_poll_response", key, f"block:{lease + 4}")
    op = pipeline.submit({"polls_to_finish": 3}, key=key)
    wait_for(lambda: fired("after_poll_response", key), timeout=20, what="a stalled poll")
    # Nobody else can write while the stalled worker still holds the lease: this is the
    # version its row carries, and so the version its late write will be fenced by.
    stalled_version = pipeline.row(op).version
    row = pipeline.wait_state(op, timeout=40)
    assert row.state == "succeeded"
    assert row.version > stalled_version
    # The stalled worker wakes after the others finished; its write must not land. Only this
    # operation's refusal counts (not another test's, nor a lease_busy, which is no fence).
    versions = wait_for(
        lambda: [r["version"] for r in logged(stack, "fenced_write_refused", operation_id=op)],
        timeout=lease + 15,
        what=f"the refused write of {op}",
    )
    assert versions == [stalled_version]
    statuses = pipeline.job_requests(op, "status")
    after = pipeline.row(op)
    assert after.version == row.version and after.state == "succeeded"
    assert after.status_requests_used == len(statuses)
    answers = [
        e
        for e in pipeline.events(op)
        if e.draft.kind.value == "polled"
        or (e.draft.kind.value == "observed" and e.draft.cause is None)
    ]
    assert len(answers) == len(statuses) - 1


def test_a_two_hour_retry_after_parks_the_operation_with_no_countdown_held_by_a_worker(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.config.celery_app import app

    op = pipeline.submit(
        {"never_finish": True, "retry_after": 7200},
        result_deadline_seconds=4 * 3600,
        cancel_deadline_seconds=4,
    )
    wait_for(lambda: "polled" in pipeline.kinds(op)[4:], timeout=20, what="the first wait")
    row = pipeline.row(op)
    assert row.state == "observing"
    assert row.next_poll_at - row.updated_at >= timedelta(seconds=7199)
    assert row.dispatched_at is None
    waits = [
        e
        for e in pipeline.events(op)
        if e.draft.kind.value in ("decision", "polled")
        and e.draft.delay_source == "provider_retry_after"
    ]
    assert waits
    scheduled = app.control.inspect(timeout=2).scheduled()
    # No answer at all would make the check below vacuous.
    assert scheduled and set(scheduled) >= {f"{w}@{socket.gethostname()}" for w in stack.workers}
    held = [
        t
        for tasks in scheduled.values()
        for t in tasks
        if op in json.dumps(t.get("request", {}).get("args", []))
    ]
    assert held == []
    assert len(pipeline.job_requests(op, "status")) == 1
    from jobwarden.tasks.humans.interventions import request_cancel

    # Leave nothing running: cancel it. The provider asked not to be polled for two hours,
    # and a cancel does not change that (invariant 3): no status read confirms the cancel
    # before its deadline, so it ends unconfirmed, and a human may check again later.
    request_cancel(op, "pytest", "end of test")
    assert pipeline.wait_state(op).state == "cancellation_unconfirmed"
    assert len(pipeline.job_requests(op, "cancel")) == 1
    assert len(pipeline.job_requests(op, "status")) == 1


def test_a_parked_operation_is_woken_by_the_sweeper_when_due_and_never_earlier(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.config.settings import get_settings

    threshold = get_settings().max_countdown_seconds
    wait = int(threshold) + 3
    op = pipeline.submit({"polls_to_finish": 2, "retry_after": wait})
    row = pipeline.wait_state(op, timeout=40)
    assert row.state == "succeeded"
    statuses = pipeline.job_requests(op, "status")
    assert len(statuses) == 2
    assert _gaps(statuses)[0] >= wait - 0.05
    parked = [
        e
        for e in pipeline.events(op)
        if e.draft.kind.value in ("decision", "polled")
        and e.draft.delay_source == "provider_retry_after"
    ]
    assert parked and parked[0].draft.excerpt["delay_seconds"] > threshold


def test_broker_down_at_submit_time_commits_the_row_and_the_sweeper_sends_the_create(
    stack: Stack, pipeline: Pipeline, database_url: str
) -> None:
    key = secrets.token_hex(8)
    env = {**os.environ, "JOBWARDEN_BROKER_URL": "redis://127.0.0.1:1/0"}
    script = (
        "import json, sys\n"
        "from jobwarden.tasks.intake import submit_operation\n"
        "r = submit_operation(tenant='acceptance', provider='sandbox', idempotency_key=sys.argv[1],"
        " command={'kind': 'export', 'behaviour': {'polls_to_finish': 1}}, requested_by='pytest')\n"
        "print(json.dumps(r.as_dict()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, key],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["outcome"] == "created"
    op = answer["operation_id"]
    pipeline.created.append(op)
    committed = pipeline.row(op)
    assert committed is not None and committed.idempotency_key == key
    # The submit's own wake-up was lost with the broker; it said so (one JSON line, the
    # script never set up logging: observability.logs formats logging's last resort) and left
    # the row due.
    said = [json.loads(ln) for ln in out.stderr.splitlines() if ln.startswith("{")]
    lost = [r for r in said if r["event"] == "enqueue_failed" and r["operation_id"] == op]
    assert lost, out.stderr
    row = pipeline.wait_state(op, timeout=40)
    assert row.state == "succeeded"
    creates = pipeline.sent_creates(op)
    assert len(creates) == 1
    assert creates[0]["idempotency_key"] == row.provider_token
    # Intent before effect: the committed intent is older than the create the sweeper caused.
    intent = pipeline.events(op)[0].draft
    assert intent.kind.value == "intent_recorded"
    sent_at = datetime.fromisoformat(creates[0]["time"].replace("Z", "+00:00"))
    assert intent.at <= sent_at
