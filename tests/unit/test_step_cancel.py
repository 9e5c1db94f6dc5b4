"""The cancel step's decisions: claiming a cancel with a confirmation timer, a cancel that
cannot be sent, and what each cancel answer leads to.

Pure, table by table, the way step_helpers says.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from jobwarden.models.actions import (
    DelaySource,
    Escalate,
    EscalationReason,
    ProviderRequest,
    RequestPurpose,
    Send,
    Wait,
)
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.provider.signals import RawResponse
from jobwarden.models.states import OperationState
from jobwarden.models.steps import after_cancel, before_cancel
from tests.unit.factories import BASE, NOW, claimed, context, planned, reply, walked
from tests.unit.step_helpers import (
    AZURE,
    GOOGLE,
    OPENAI,
    SANDBOX,
    TRANSPORT_FAILURES,
    cancelling_requested,
)

S = OperationState
R = EscalationReason


@pytest.mark.parametrize(
    ("ctx", "overrides", "url", "deadline", "wake_at"),
    [
        (
            SANDBOX,
            {},
            f"{BASE}/v1/jobs/job-1/cancel",
            NOW + timedelta(minutes=5),
            NOW + timedelta(seconds=0.2),
        ),
        # No recorded deadline: the contract's cancel bound from now.
        (
            SANDBOX,
            {"cancel_deadline": None},
            f"{BASE}/v1/jobs/job-1/cancel",
            NOW + timedelta(seconds=60),
            NOW + timedelta(seconds=0.2),
        ),
        # The first confirmation poll never lies past the cancel deadline.
        (
            OPENAI,
            {"remote_job_id": "batch_1", "cancel_deadline": NOW + timedelta(seconds=10)},
            "https://api.openai.com/v1/batches/batch_1/cancel",
            NOW + timedelta(seconds=10),
            NOW + timedelta(seconds=10),
        ),
        (
            GOOGLE,
            {"remote_job_id": "operations/abc"},
            "https://example.googleapis.com/v1/operations/abc:cancel",
            NOW + timedelta(minutes=5),
            NOW + timedelta(seconds=2),
        ),
    ],
)
def test_a_cancel_is_claimed_moving_to_cancelling_with_a_confirmation_timer(
    ctx: StepContext,
    overrides: dict[str, Any],
    url: str,
    deadline: datetime,
    wake_at: datetime,
) -> None:
    op = cancelling_requested(**overrides)
    decided = before_cancel(op, ctx, NOW)
    assert decided.action == Send(
        request=ProviderRequest(purpose=RequestPurpose.cancel, method="POST", url=url),
        event=EventKind.cancel_sent,
        move_to=S.cancelling,
        changes={"cancel_deadline": deadline},
        wake_at=wake_at,
    )
    p = planned(op, decided)
    assert walked(op.state, p) == [S.cancelling]
    assert (p.changes["cancel_deadline"], p.changes["next_poll_at"]) == (deadline, wake_at)


@pytest.mark.parametrize(
    ("ctx", "overrides"),
    [(AZURE, {}), (SANDBOX, {"remote_job_id": None})],
    ids=["no_cancel_endpoint", "no_remote_job"],
)
def test_a_cancel_that_cannot_be_sent_is_cancellation_unconfirmed(
    ctx: StepContext, overrides: dict[str, Any]
) -> None:
    op = cancelling_requested(**overrides)
    decided = before_cancel(op, ctx, NOW)
    detail = (
        "the contract has no cancel endpoint"
        if ctx.contract.cancel is None
        else "no remote job id is known to cancel"
    )
    assert decided.action == Escalate(
        reason=R.cancellation_unconfirmed, detail=detail, state=S.cancellation_unconfirmed
    )
    assert walked(op.state, planned(op, decided)) == [S.cancelling, S.cancellation_unconfirmed]


def test_a_cancel_url_on_a_foreign_origin_is_never_sent() -> None:
    cancel = SANDBOX.contract.cancel
    assert cancel is not None
    ctx = context(cancel=replace(cancel, path="https://evil.example/v1/jobs/{job_id}/cancel"))
    op = cancelling_requested()
    decided = before_cancel(op, ctx, NOW)
    assert isinstance(decided.action, Escalate)
    # While a cancel is ours every stop is cancellation_unconfirmed, whatever the reason.
    assert (decided.action.reason, decided.action.state) == (
        R.contract_violation,
        S.cancellation_unconfirmed,
    )
    assert walked(op.state, planned(op, decided)) == [S.cancelling, S.cancellation_unconfirmed]


def test_the_first_confirming_poll_after_a_cancel_honours_the_providers_last_retry_after() -> None:
    op = cancelling_requested(poll_not_before=NOW + timedelta(seconds=40))
    action = before_cancel(op, SANDBOX, NOW).action
    assert isinstance(action, Send)
    assert action.wake_at == NOW + timedelta(seconds=40)


def sent_cancel() -> tuple[Operation, Send]:
    op = cancelling_requested()
    decided = before_cancel(op, SANDBOX, NOW)
    assert isinstance(decided.action, Send)
    return claimed(op, planned(op, decided)), decided.action


@pytest.mark.parametrize("code", [401, 403])
def test_a_denied_cancel_escalates_authorization_denied_as_cancellation_unconfirmed(
    code: int,
) -> None:
    op, send = sent_cancel()
    answer = reply(code)
    decided = after_cancel(op, SANDBOX, send.request, answer, NOW, 1.0)
    assert decided.action == Escalate(
        reason=R.authorization_denied,
        detail=f"HTTP {code} on cancel",
        state=S.cancellation_unconfirmed,
    )
    assert walked(op.state, planned(op, decided, answer=answer)) == [S.cancellation_unconfirmed]


@pytest.mark.parametrize(
    "answer",
    [
        reply(200, {"id": "job-1", "status": "cancelled"}),  # still only a status read confirms
        reply(202, {"status": "cancelling"}),
        reply(204),
        reply(400),
        reply(404),
        reply(409),
        reply(410),
        reply(422),
        reply(429, headers={"retry-after": "5"}),
        reply(500),
        reply(503),
        reply(200, body_problem="malformed_json"),
    ]
    + [reply(None, failure=f) for f in TRANSPORT_FAILURES],
)
def test_any_other_cancel_answer_waits_for_a_status_read_to_confirm(answer: RawResponse) -> None:
    op, send = sent_cancel()
    assert op.state is S.cancelling
    decided = after_cancel(op, SANDBOX, send.request, answer, NOW, 1.0)
    code = answer.observation.status_code
    assert SANDBOX.contract.cancel is not None
    # The contract's accepted statuses tell "received" from "not accepted" in the history;
    # either way only a status read may say the job is cancelled.
    cause = (
        "cancel sent; confirm by status reads"
        if code in SANDBOX.contract.cancel.accepted_statuses
        else f"cancel not accepted (http {code or '-'}): the status reads say what the job does"
    )
    assert decided.action == Wait(
        until=NOW + timedelta(seconds=0.2),
        delay_seconds=0.2,
        delay_source=DelaySource.initial_delay,
        clipped_to_deadline=False,
        cause=cause,
    )
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == []  # sending a cancel is not cancelled
    assert [e.kind for e in p.events] == [EventKind.observed, EventKind.decision]
