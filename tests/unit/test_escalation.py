"""Escalation options are bounded by reason and state, and never reset counters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobwarden.models.errors import RefusedInputError
from jobwarden.models.humans.escalation import (
    EXTEND_CHECKS,
    Bounds,
    EscalationView,
    OptionKind,
    apply_option,
    options_for,
)
from jobwarden.models.polling.decisions import EscalationReason as R
from jobwarden.models.states import OperationState as S
from jobwarden.models.states import is_allowed

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
BOUNDS = Bounds(
    result_deadline=NOW - timedelta(minutes=1),
    max_status_requests=10,
    max_transport_failures=3,
    cancel_deadline=None,
)


def view(
    state: S = S.escalated,
    reason: R | None = R.request_budget_exhausted,
    *,
    job: bool = True,
    cancel: bool = True,
    extensions: int = 0,
) -> EscalationView:
    return EscalationView(
        state=state,
        reason=reason,
        has_remote_job=job,
        contract_has_cancel=cancel,
        extensions_used=extensions,
    )


def kinds(v: EscalationView) -> list[OptionKind]:
    return [o.kind for o in options_for(v)]


def test_budget_exhausted_offers_extend_once_cancel_and_abandon() -> None:
    assert kinds(view()) == [OptionKind.extend, OptionKind.cancel_at_provider, OptionKind.abandon]
    assert kinds(view(extensions=1)) == [OptionKind.cancel_at_provider, OptionKind.abandon]


def test_cancel_at_provider_is_offered_only_where_the_contract_has_a_cancel() -> None:
    assert OptionKind.cancel_at_provider not in kinds(view(cancel=False))


def test_without_a_remote_job_only_abandon_is_offered() -> None:
    assert kinds(view(reason=R.contract_violation, job=False)) == [OptionKind.abandon]


def test_authorization_denied_may_resume_after_the_credential_is_fixed() -> None:
    assert OptionKind.resume in kinds(view(reason=R.authorization_denied))


def test_running_operations_offer_nothing() -> None:
    assert options_for(view(state=S.observing)) == []


def test_extend_raises_bounds_and_never_resets_counters() -> None:
    changes = apply_option(
        view(), OptionKind.extend, BOUNDS, now=NOW, cancel_window=timedelta(minutes=5)
    )
    assert changes["max_status_requests"] == 10 + EXTEND_CHECKS
    assert changes["result_deadline"] == NOW + timedelta(minutes=15)
    assert changes["extensions_used"] == 1
    assert "status_requests_used" not in changes
    assert "transport_failures_used" not in changes


def test_an_option_not_on_offer_is_refused() -> None:
    with pytest.raises(RefusedInputError, match="not offered"):
        apply_option(
            view(extensions=1),
            OptionKind.extend,
            BOUNDS,
            now=NOW,
            cancel_window=timedelta(minutes=5),
        )


@pytest.mark.parametrize("state", [S.escalated, S.result_timed_out, S.cancellation_unconfirmed])
@pytest.mark.parametrize("reason", list(R))
def test_every_offered_option_is_an_allowed_transition(state: S, reason: R) -> None:
    v = view(state=state, reason=reason)
    for option in options_for(v):
        if option.kind is OptionKind.resubmit:
            continue  # a new operation; this one stays where it is (test_state_tables.py)
        changes = apply_option(v, option.kind, BOUNDS, now=NOW, cancel_window=timedelta(minutes=5))
        assert is_allowed(state, S(changes["state"])), (state, option.kind)
