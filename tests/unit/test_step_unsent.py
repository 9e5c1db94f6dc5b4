"""A claimed request whose deadline passed before it left (``steps.unsent``): create,
reconcile and status requests are not sent, and one claimed in time is.

Pure, table by table, the way step_helpers says.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobwarden.models.actions import Decided, Escalate, EscalationReason, Finish, Send
from jobwarden.models.history.chain import EventKind
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.states import OperationState
from jobwarden.models.steps import before_cancel, before_poll, unsent
from tests.unit.factories import NOW, claimed, planned, walked
from tests.unit.step_helpers import (
    CREATE_DEADLINE,
    LOOKUP,
    RESULT_DEADLINE,
    SANDBOX,
    cancelling_requested,
    polling,
    sent_create,
    sent_reconcile,
)

S = OperationState
R = EscalationReason


@pytest.mark.parametrize(
    ("state", "state_after"),
    [(S.observing, S.result_timed_out), (S.cancelling, S.cancellation_unconfirmed)],
)
def test_a_status_request_whose_deadline_passed_after_the_claim_is_not_sent(
    state: S, state_after: S
) -> None:
    op = polling(state)
    decided = before_poll(op, SANDBOX, NOW)
    assert isinstance(decided.action, Send)
    after_claim = claimed(op, planned(op, decided))
    late = unsent(after_claim, decided.action, decided.action.deadline or NOW)
    assert late is not None
    assert isinstance(late.action, Escalate)
    assert late.action.detail.endswith("; reserved request not sent")
    assert late.action.state is state_after
    assert walked(after_claim.state, planned(after_claim, late)) == [state_after]


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({}, "create_deadline_exceeded; reserved create not sent"),
        (
            {"approval_expires_at": NOW + timedelta(seconds=1)},
            "approval_expired before the create was sent; reserved create not sent",
        ),
    ],
)
def test_a_create_whose_deadline_passed_after_the_claim_fails_unsent(
    overrides: dict[str, Any], reason: str
) -> None:
    op, send = sent_create(**overrides)
    assert op.last_event_kind is EventKind.create_sent
    late = unsent(op, send, CREATE_DEADLINE)
    assert late == Decided(action=Finish(state=S.failed, reason=reason))
    assert walked(op.state, planned(op, late, now=CREATE_DEADLINE)) == [S.failed]


@pytest.mark.parametrize("ctx", [SANDBOX, LOOKUP], ids=["same_token", "lookup"])
def test_a_reconciliation_whose_deadline_passed_after_the_claim_escalates_unsent(
    ctx: StepContext,
) -> None:
    op, send = sent_reconcile(ctx)
    late = unsent(op, send, CREATE_DEADLINE + timedelta(seconds=1))
    assert late == Decided(
        action=Escalate(
            reason=R.deadline_exceeded,
            detail="create deadline passed while reconciling; reserved request not sent",
            state=S.escalated,
        )
    )


def test_a_claimed_request_before_its_deadline_is_sent() -> None:
    just_before = CREATE_DEADLINE - timedelta(microseconds=1)
    op, send = sent_create()
    assert unsent(op, send, just_before) is None
    op, send = sent_reconcile(LOOKUP)
    assert unsent(op, send, just_before) is None
    poll = polling(S.observing)
    status = before_poll(poll, SANDBOX, NOW).action
    assert isinstance(status, Send)
    assert unsent(poll, status, RESULT_DEADLINE - timedelta(microseconds=1)) is None
    cancel = before_cancel(cancelling_requested(), SANDBOX, NOW).action
    assert isinstance(cancel, Send)
    assert unsent(cancelling_requested(), cancel, NOW + timedelta(days=30)) is None
