"""Cancelling with confirmation, and collecting, validating and storing results.

`cancel_requested` is our fact, `cancelled` is the provider's: these scenarios
check both sides, the sandbox's request log and the operation's history.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import pytest

from jobwarden.demo.harness import REPO, Stack
from tests.acceptance.conftest import Pipeline, result_bytes

NEVER_FINISHES = {"never_finish": True, "cancel": "honour"}


def _at(entry: dict[str, Any]) -> datetime:
    """When the sandbox received a logged request."""
    return datetime.fromisoformat(entry["time"].replace("Z", "+00:00"))


def _observing(pipeline: Pipeline, op: str) -> None:
    """Wait until the operation polls a running remote job."""
    pipeline.wait_state(op, "observing")


def _in_order(kinds: list[str], expected: list[str]) -> bool:
    """True when ``expected`` is a subsequence of ``kinds``."""
    it = iter(kinds)
    return all(kind in it for kind in expected)


def _remote_state(event: Any) -> str | None:
    return (event.draft.excerpt or {}).get("remote_state")


def test_cancel_while_running_ends_cancelled_only_after_the_provider_confirms(
    stack: Stack, pipeline: Pipeline, worker_env: dict[str, str]
) -> None:
    from jobwarden.tasks.humans.interventions import request_cancel

    op = pipeline.submit(NEVER_FINISHES)
    _observing(pipeline, op)
    assert request_cancel(op, "pytest", "no longer needed") in {"cancel_requested", "cancelling"}
    row = pipeline.wait_state(op)
    assert row.state == "cancelled"
    assert row.cancel_requested_by == "pytest" and row.cancel_reason == "no longer needed"

    cancels = pipeline.job_requests(op, "cancel")
    assert len(cancels) == 1
    assert cancels[0]["status"] == 202
    # Confirmation came from a status read sent after the cancel, not from the cancel answer.
    later_statuses = [
        r for r in pipeline.job_requests(op, "status") if r["seq"] > cancels[0]["seq"]
    ]
    assert later_statuses
    assert pipeline.remote_jobs(op)[0]["status"] == "cancelled"

    events = pipeline.events(op)
    kinds = [e.draft.kind.value for e in events]
    assert _in_order(kinds, ["cancel_requested", "cancel_sent", "observed", "cancel_confirmed"])
    assert kinds[-1] == "cancel_confirmed"
    assert kinds.count("cancel_requested") == kinds.count("cancel_sent") == 1
    moves = [(e.draft.from_state, e.draft.to_state) for e in events if e.draft.to_state]
    assert ("observing", "cancel_requested") in moves
    assert ("cancel_requested", "cancelling") in moves
    assert moves[-1] == ("cancelling", "cancelled")
    # Nothing said `cancelled` before the provider did.
    first_cancelled = next(i for i, e in enumerate(events) if e.draft.to_state == "cancelled")
    assert first_cancelled == len(events) - 1
    said_cancelled = [
        i
        for i, e in enumerate(events)
        if e.draft.kind.value == "observed" and _remote_state(e) == "cancelled"
    ]
    assert said_cancelled and said_cancelled[0] < first_cancelled
    assert all(_remote_state(e) != "cancelled" for e in events[: said_cancelled[0]])
    assert _at(cancels[0]) <= events[first_cancelled].draft.at
    # The cancel was woken by its own message, not rescued later by the sweeper.
    asked = next(e.draft.at for e in events if e.draft.kind.value == "cancel_requested")
    sweeper_grace = float(worker_env["JOBWARDEN_REDISPATCH_AFTER_SECONDS"])
    assert _at(cancels[0]) - asked < timedelta(seconds=sweeper_grace)


def test_cancel_that_races_the_finish_ends_succeeded_and_the_history_shows_both(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.humans.interventions import request_cancel

    op = pipeline.submit({"never_finish": True, "cancel": "race", "result_items": 5})
    _observing(pipeline, op)
    request_cancel(op, "pytest", "changed my mind")
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    assert row.validation_summary["valid"] is True
    assert row.validation_summary["record_count"] == 5

    assert len(pipeline.job_requests(op, "cancel")) == 1
    assert [r["kind"] for r in pipeline.job_requests(op, "result")] == ["result"]
    events = pipeline.events(op)
    kinds = [e.draft.kind.value for e in events]
    assert _in_order(
        kinds, ["cancel_requested", "cancel_sent", "result_fetch_sent", "result_collected"]
    )
    assert kinds[-1] == "result_collected"
    assert "cancel_confirmed" not in kinds
    moves = [(e.draft.from_state, e.draft.to_state) for e in events if e.draft.to_state]
    # It ended as it really ended: the provider reported success while we were cancelling.
    assert ("cancelling", "result_collecting") in moves
    assert moves[-1] == ("result_collecting", "succeeded")
    assert all(to != "cancelled" for _, to in moves)
    assert any(e.draft.kind.value == "observed" and _remote_state(e) == "succeeded" for e in events)


def test_cancel_never_confirmed_stops_at_the_cancel_deadline_as_cancellation_unconfirmed(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.humans.interventions import request_cancel

    op = pipeline.submit({"never_finish": True, "cancel": "never"}, cancel_deadline_seconds=2)
    _observing(pipeline, op)
    before = datetime.now().astimezone()
    request_cancel(op, "pytest", "too slow")
    row = pipeline.wait_state(op, timeout=15)
    assert row.state == "cancellation_unconfirmed"
    assert row.escalation_reason == "cancellation_unconfirmed"
    assert row.escalation_detail
    assert row.next_poll_at is None
    # The override bounded the wait, not the contract's 60 s.
    assert before + timedelta(seconds=1.5) <= row.cancel_deadline
    assert row.cancel_deadline <= before + timedelta(seconds=3)

    cancels = pipeline.job_requests(op, "cancel")
    assert len(cancels) == 1
    statuses = pipeline.job_requests(op, "status")
    confirming = [r for r in statuses if r["seq"] > cancels[0]["seq"]]
    assert confirming, "the cancel was never checked by a status read"
    assert all(_at(r) < row.cancel_deadline for r in statuses)

    events = pipeline.events(op)
    kinds = [e.draft.kind.value for e in events]
    assert _in_order(kinds, ["cancel_requested", "cancel_sent", "escalated"])
    assert kinds[-1] == "escalated"
    last = events[-1].draft
    assert (last.from_state, last.to_state) == ("cancelling", "cancellation_unconfirmed")
    assert last.cause == "cancellation_unconfirmed"
    assert row.cancel_deadline <= last.at < row.cancel_deadline + timedelta(seconds=3)
    assert all(e.draft.to_state != "cancelled" for e in events)


def test_result_with_a_bad_checksum_fails_validation_and_never_succeeds(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"polls_to_finish": 2, "result_bad_checksum": True})
    row = pipeline.wait_state(op)
    assert row.state == "result_validation_failed"
    assert row.validation_summary["valid"] is False
    assert "checksum" in row.validation_summary["problem"]
    kinds = pipeline.kinds(op)
    assert "result_collected" not in kinds
    assert kinds[-1] == "result_rejected"
    assert all(e.draft.to_state != "succeeded" for e in pipeline.events(op))
    assert len(pipeline.job_requests(op, "result")) == 1
    assert _stored_result(pipeline, op) is None


def test_result_with_two_failed_items_of_500_succeeds_with_per_item_outcomes_and_stored_bytes(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"polls_to_finish": 2, "result_items": 500, "result_failed_items": 2})
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    summary = row.validation_summary
    assert summary["valid"] is True
    assert summary["record_count"] == 500
    assert summary["succeeded_items"] == 498
    assert summary["failed_item_count"] == 2
    assert summary["failed_item_refs"] == ["item-499", "item-500"]

    stored = _stored_result(pipeline, op)
    assert stored is not None
    content, sha256, size, record_count, failed_items = stored
    assert hashlib.sha256(content).hexdigest() == sha256 == summary["sha256"]
    assert size == len(content) == summary["size_bytes"]
    assert record_count == 500
    assert [item["ref"] for item in failed_items] == ["item-499", "item-500"]
    # The provider's own checksum, from its status answer, matches the stored bytes.
    announced = [
        (e.draft.excerpt or {}).get("body", {}).get("result")
        for e in pipeline.events(op)
        if e.draft.kind.value == "observed"
    ]
    assert [r["sha256"] for r in announced if r] == [sha256]
    event = next(e for e in pipeline.events(op) if e.draft.kind.value == "result_collected")
    assert event.draft.excerpt["failed_item_refs"] == ["item-499", "item-500"]


def _stored_result(pipeline: Pipeline, op: str) -> tuple[Any, ...] | None:
    from jobwarden.models.persistence.db import transaction
    from jobwarden.models.persistence.tables import ResultRow

    with transaction(pipeline.database_url) as session:
        found = session.get(ResultRow, uuid.UUID(op))
        if found is None:
            return None
        return (
            result_bytes(found),
            found.sha256,
            found.size_bytes,
            found.record_count,
            found.failed_items,
        )


def test_cancel_of_a_terminal_operation_is_refused_and_records_nothing(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.models.errors import RefusedInputError
    from jobwarden.tasks.humans.interventions import request_cancel

    op = pipeline.submit({"polls_to_finish": 1})
    before = pipeline.wait_state(op)
    assert before.state == "succeeded"
    requests_before = len(pipeline.sandbox.requests())
    with pytest.raises(RefusedInputError, match="succeeded"):
        request_cancel(op, "pytest", "too late")
    after = pipeline.row(op)
    assert (
        after.state,
        after.version,
        after.event_count,
        after.cancel_requested_by,
        after.cancel_deadline,
    ) == ("succeeded", before.version, before.event_count, None, None)
    assert "cancel_requested" not in pipeline.kinds(op)
    assert len(pipeline.sandbox.requests()) == requests_before
    assert pipeline.job_requests(op, "cancel") == []


def test_cancel_requested_twice_sends_one_cancel(stack: Stack, pipeline: Pipeline) -> None:
    from jobwarden.models.errors import RefusedInputError
    from jobwarden.tasks.humans.interventions import request_cancel

    op = pipeline.submit(NEVER_FINISHES)
    _observing(pipeline, op)
    first = request_cancel(op, "pytest", "first ask")
    try:
        second = request_cancel(op, "someone-else", "second ask")
    except RefusedInputError:
        # A worker sent the first cancel and the provider confirmed it in between (a loaded
        # machine gives it the time): nothing is left to stop, and nothing more is sent.
        second = "ended"
    assert first == "cancel_requested"
    assert second in {"cancel_requested", "cancelling", "ended"}
    row = pipeline.wait_state(op)
    assert row.state == "cancelled"
    assert (row.cancel_requested_by, row.cancel_reason) == ("pytest", "first ask")
    assert len(pipeline.job_requests(op, "cancel")) == 1
    kinds = pipeline.kinds(op)
    assert kinds.count("cancel_requested") == 1
    assert kinds.count("cancel_sent") == 1
    assert kinds.count("cancel_confirmed") == 1


def test_concurrent_cancel_requests_record_one_intent_and_send_one_cancel(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.models.errors import RefusedInputError
    from jobwarden.tasks.humans.interventions import request_cancel

    op = pipeline.submit(NEVER_FINISHES)
    _observing(pipeline, op)

    def ask(i: int) -> str:
        try:
            return request_cancel(op, f"caller-{i}", "stop")
        except RefusedInputError as exc:
            # A caller that waited out the whole cancel finds a terminal operation.
            assert "is cancelled" in str(exc)
            return "refused: cancelled"

    with ThreadPoolExecutor(max_workers=5) as pool:
        answers = list(pool.map(ask, range(5)))
    assert "cancel_requested" in answers
    assert set(answers) <= {"cancel_requested", "cancelling", "refused: cancelled"}
    assert pipeline.wait_state(op).state == "cancelled"
    assert len(pipeline.job_requests(op, "cancel")) == 1
    kinds = pipeline.kinds(op)
    assert kinds.count("cancel_requested") == kinds.count("cancel_sent") == 1


def test_history_command_tells_the_cancel_story_one_line_per_event(
    stack: Stack, pipeline: Pipeline, worker_env: dict[str, str]
) -> None:
    from jobwarden.tasks.humans.interventions import request_cancel

    op = pipeline.submit(NEVER_FINISHES)
    _observing(pipeline, op)
    request_cancel(op, "pytest", "operator said stop")
    assert pipeline.wait_state(op).state == "cancelled"
    out = subprocess.run(
        [sys.executable, "-m", "jobwarden.cli.main", "history", op],
        env={**stack.env, **worker_env},
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    events = pipeline.events(op)
    # One line per event, then one per intake attempt (this operation was submitted once).
    lines, attempts = out.splitlines()[: len(events)], out.splitlines()[len(events) :]
    assert len(attempts) == 1 and "intake created" in attempts[0]

    def line_of(kind: str) -> int:
        return next(i for i, e in enumerate(events) if e.draft.kind.value == kind)

    requested, sent, confirmed = (
        line_of(k) for k in ("cancel_requested", "cancel_sent", "cancel_confirmed")
    )
    assert requested < sent < confirmed == len(lines) - 1
    assert "cancel requested" in lines[requested]
    assert "operator said stop" in lines[requested]
    assert "cancel_requested" in lines[requested]
    assert "cancel sent" in lines[sent] and "cancelling" in lines[sent]
    assert "cancel response" in lines[sent + 1] and "202" in lines[sent + 1]
    assert "cancel confirmed" in lines[confirmed] and "-> cancelled" in lines[confirmed]
    assert any("cancelled" in line and "polled" in line for line in lines[sent + 2 : confirmed])
