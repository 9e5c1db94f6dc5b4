"""The poll step's decisions around the request: reserving a status request before it is
sent, early wake-ups, and what a finished status read collects (the poll's signal tables
are test_decisions').

Pure, table by table, the way step_helpers says.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from jobwarden.models.actions import (
    Collect,
    Decided,
    DelaySource,
    Escalate,
    EscalationReason,
    NotYet,
    ProviderRequest,
    RequestPurpose,
    Send,
    Wait,
)
from jobwarden.models.history.chain import EventKind
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.states import OperationState
from jobwarden.models.steps import after_poll, before_poll
from tests.unit.factories import BASE, NOW, planned, reply, walked
from tests.unit.step_helpers import CONTEXTS, RESULT_DEADLINE, SANDBOX, SHA, polling

S = OperationState
R = EscalationReason


@pytest.mark.parametrize(
    ("state", "move_to", "deadline"),
    [
        (S.accepted, S.observing, RESULT_DEADLINE),
        (S.observing, None, RESULT_DEADLINE),
        (S.cancelling, None, NOW + timedelta(minutes=5)),
    ],
)
def test_a_due_poll_reserves_one_status_request_before_it_is_sent(
    state: S, move_to: S | None, deadline: datetime
) -> None:
    op = polling(state)
    decided = before_poll(op, SANDBOX, NOW)
    assert decided.action == Send(
        request=ProviderRequest(
            purpose=RequestPurpose.status, method="GET", url=f"{BASE}/v1/jobs/job-1"
        ),
        event=EventKind.poll_sent,
        counters={"status_requests_used": 4},
        move_to=move_to,
        excerpt={"request": 4, "of": 50},
        deadline=deadline,
    )
    p = planned(op, decided)
    assert p.changes["status_requests_used"] == 4
    assert walked(op.state, p) == ([move_to] if move_to else [])


@pytest.mark.parametrize("state", [S.accepted, S.observing, S.cancelling])
def test_an_early_poll_wake_up_writes_nothing(state: S) -> None:
    op = polling(state, next_poll_at=NOW + timedelta(seconds=1))
    decided = before_poll(op, SANDBOX, NOW)
    assert decided.action == NotYet(until=None)
    assert planned(op, decided).empty


@pytest.mark.parametrize(
    ("state", "overrides", "now", "reason", "path"),
    [
        (S.accepted, {}, RESULT_DEADLINE, R.deadline_exceeded, [S.observing, S.result_timed_out]),
        (S.observing, {}, RESULT_DEADLINE, R.deadline_exceeded, [S.result_timed_out]),
        # The deadline is checked first, even on a wake-up that looks early.
        (
            S.observing,
            {"next_poll_at": RESULT_DEADLINE + timedelta(hours=1)},
            RESULT_DEADLINE,
            R.deadline_exceeded,
            [S.result_timed_out],
        ),
        (
            S.cancelling,
            {},
            NOW + timedelta(minutes=5),
            R.cancellation_unconfirmed,
            [S.cancellation_unconfirmed],
        ),
        (
            S.accepted,
            {"status_requests_used": 50},
            NOW,
            R.request_budget_exhausted,
            [S.observing, S.escalated],
        ),
        (
            S.observing,
            {"status_requests_used": 50},
            NOW,
            R.request_budget_exhausted,
            [S.escalated],
        ),
        (
            S.cancelling,
            {"status_requests_used": 50},
            NOW,
            R.cancellation_unconfirmed,
            [S.cancellation_unconfirmed],
        ),
        (S.observing, {"status_url": None}, NOW, R.contract_violation, [S.escalated]),
        # Invariant 10 again before every poll: the credential never leaves the contract.
        (
            S.observing,
            {"status_url": "https://evil.example/v1/jobs/job-1"},
            NOW,
            R.contract_violation,
            [S.escalated],
        ),
        (
            S.cancelling,
            {"status_url": "https://evil.example/v1/jobs/job-1"},
            NOW,
            R.contract_violation,
            [S.cancellation_unconfirmed],
        ),
    ],
)
def test_a_poll_past_its_deadline_or_budget_stops_before_any_request(
    state: S, overrides: dict[str, Any], now: datetime, reason: R, path: list[S]
) -> None:
    op = polling(state, **overrides)
    decided = before_poll(op, SANDBOX, now)
    assert isinstance(decided.action, Escalate)
    assert decided.action.reason is reason
    assert walked(op.state, planned(op, decided, now=now)) == path


@pytest.mark.parametrize("state", [S.accepted, S.observing, S.cancelling])
def test_a_poll_woken_before_the_providers_last_retry_after_waits_it_out(state: S) -> None:
    # e.g. a person's cancel or resume wakes the operation at once (next_poll_at = now).
    op = polling(state, poll_not_before=NOW + timedelta(seconds=25))
    decided = before_poll(op, SANDBOX, NOW)
    assert decided.action == Wait(
        until=NOW + timedelta(seconds=25),
        delay_seconds=25.0,
        delay_source=DelaySource.provider_retry_after,
        clipped_to_deadline=False,
        cause="the provider's last Retry-After still holds",
    )
    p = planned(op, decided)
    # Nothing is sent; the wait's commit reserves the one request it waits for.
    assert (p.changes["status_requests_used"], p.changes["reserved_request"]) == (
        op.status_requests_used + 1,
        op.status_requests_used + 1,
    )
    assert walked(op.state, p) == []
    # A reservation already standing is not doubled.
    reserved = replace(
        op,
        status_requests_used=op.status_requests_used + 1,
        reserved_request=op.status_requests_used + 1,
    )
    again = planned(reserved, before_poll(reserved, SANDBOX, NOW))
    assert "status_requests_used" not in again.changes
    assert "reserved_request" not in again.changes


def status_read(ctx: StepContext, body: object) -> Decided:
    """after_poll on a claimed status request (the poll's own tables are test_decisions')."""
    op = polling(S.observing, status_requests_used=4, status_url=f"{ctx.base_url}/j/1")
    request = ProviderRequest(
        purpose=RequestPurpose.status, method="GET", url=f"{ctx.base_url}/j/1"
    )
    return after_poll(op, ctx, request, reply(200, body), NOW, 1.0)


@pytest.mark.parametrize(
    ("name", "body", "ref", "expected"),
    [
        (
            "sandbox",
            {"status": "succeeded", "result": {"url": "/v1/jobs/job-1/result", "sha256": SHA}},
            "/v1/jobs/job-1/result",
            {"expected_sha256": SHA},
        ),
        # The contract promises a checksum: its absence is carried, and fails validation later.
        (
            "sandbox",
            {"status": "succeeded", "result": {"url": "/r"}},
            "/r",
            {"expected_sha256": None},
        ),
        (
            "google_aip151",
            {"name": "operations/abc", "done": True, "response": {"rows": 3}},
            None,
            {"inline": {"rows": 3}},
        ),
        (
            "openai_batch",
            {"id": "batch_1", "status": "completed", "output_file_id": "file-1"},
            "file-1",
            {},
        ),
    ],
)
def test_a_finished_job_is_collected_with_what_its_status_promised_and_a_fetch_deadline(
    name: str, body: object, ref: str | None, expected: dict[str, Any]
) -> None:
    ctx = CONTEXTS[name]
    window = timedelta(seconds=ctx.contract.limits.result_fetch_deadline_seconds)
    decided = status_read(ctx, body)
    assert decided.action == Collect(result_ref=ref, expected=expected, deadline=NOW + window)


def test_a_result_reference_that_is_not_a_usable_url_is_a_contract_violation() -> None:
    decided = status_read(
        SANDBOX, {"status": "succeeded", "result": {"url": "/r\n/x", "sha256": SHA}}
    )
    assert isinstance(decided.action, Escalate)
    assert decided.action.reason is R.contract_violation


def test_progress_100_is_not_success() -> None:
    decided = status_read(SANDBOX, {"status": "running", "progress": 100})
    assert isinstance(decided.action, Wait)
    assert decided.changes["progress"] == 100.0
