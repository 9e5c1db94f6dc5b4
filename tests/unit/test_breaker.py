"""The provider breaker's pure half (issue 39): the ``[breaker]`` table, what an answer
counts as, when a window's counts open the breaker and why, the evidence, and how an
answer is decided while the breaker is open (no budget spent, nothing escalated)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.actions import (
    Decided,
    DelaySource,
    EscalationReason,
    Move,
    ProviderRequest,
    RequestPurpose,
    Send,
    Wait,
    escalate,
)
from jobwarden.models.contracts.contract import Breaker
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.errors import ContractError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.holds import Hold
from jobwarden.models.humans.pauses import held
from jobwarden.models.provider.breaker import (
    AnswerClass,
    WindowCounts,
    answer_class,
    describe,
    evidence,
    not_counted,
    probe_wake,
    sample,
    tripped,
)
from jobwarden.models.provider.signals import HttpObservation, TransportFailure
from jobwarden.models.states import OperationState as S
from tests.unit.factories import NOW, SHIPPED, operation, planned

SANDBOX = (SHIPPED / "sandbox.toml").read_text()
POLICY = Breaker(window_seconds=10, minimum_count=20, max_rate_limited=30)
OP = uuid.UUID(int=3)
PAUSE = uuid.UUID(int=7)
INCIDENT = uuid.UUID(int=9)


def _contract(tmp_path: Path, table: str) -> Breaker | None:
    path = tmp_path / "sandbox.toml"
    path.write_text(SANDBOX.replace("[limits]", table + "\n[limits]", 1))
    return load_contract(path).breaker


# --- the contract table ---------------------------------------------------------------


def test_a_contract_without_a_breaker_table_has_no_breaker() -> None:
    assert load_contract(SHIPPED / "sandbox.toml").breaker is None


def test_a_breaker_table_is_read_with_its_defaults(tmp_path: Path) -> None:
    found = _contract(tmp_path, "[breaker]\nwindow_seconds = 5\nminimum_count = 3\n")
    assert found == Breaker(window_seconds=5.0, minimum_count=3)


@pytest.mark.parametrize(
    ("table", "field", "problem"),
    [
        ("window_seconds = 0", "breaker.window_seconds", "positive number"),
        ("minimum_count = 0", "breaker.minimum_count", "positive whole number"),
        ("minimum_count = 1.5", "breaker.minimum_count", "whole number"),
        ("server_error_share = 1.5", "breaker.server_error_share", "between 0 and 1"),
        ("transport_share = 0", "breaker.transport_share", "must be above 0"),
        ("denied_share = 0", "breaker.denied_share", "must be above 0"),
        ("cooldown_seconds = -1", "breaker.cooldown_seconds", ""),
        ("max_rate_limited = 0", "breaker.max_rate_limited", "positive whole number"),
        ("surprise = 1", "breaker.surprise", ""),
    ],
)
def test_a_bad_breaker_value_is_refused_naming_its_field(
    tmp_path: Path, table: str, field: str, problem: str
) -> None:
    with pytest.raises(ContractError) as caught:
        _contract(tmp_path, f"[breaker]\n{table}\n")
    assert caught.value.field == field
    assert problem in str(caught.value)


# --- what an answer counts as ---------------------------------------------------------

WAIT = Decided(
    action=Wait(
        until=NOW + timedelta(seconds=1),
        delay_seconds=1,
        delay_source=DelaySource.local_backoff,
        clipped_to_deadline=False,
    ),
    changes={"transport_failures_used": 4, "poll_attempt": 2},
)


def _obs(code: int | None, failure: TransportFailure | None = None) -> HttpObservation:
    return HttpObservation(
        status_code=code, headers={}, body=None, body_problem=None, transport_failure=failure
    )


@pytest.mark.parametrize(
    ("code", "failure", "expected"),
    [
        (200, None, AnswerClass.ok),
        (202, None, AnswerClass.ok),
        (404, None, AnswerClass.ok),
        (500, None, AnswerClass.server_error),
        (503, None, AnswerClass.server_error),
        (None, TransportFailure.read_timeout, AnswerClass.transport),
        (None, TransportFailure.connect_refused, AnswerClass.transport),
        (401, None, AnswerClass.denied),
        (403, None, AnswerClass.denied),
        (429, None, AnswerClass.rate_limited),
    ],
)
def test_each_answer_counts_as_one_class(
    code: int | None, failure: TransportFailure | None, expected: AnswerClass
) -> None:
    assert answer_class(_obs(code, failure), WAIT) is expected


def test_an_unknown_state_is_what_the_decision_says_of_a_readable_answer() -> None:
    unknown = Decided(action=escalate(S.observing, EscalationReason.unknown_state, "weird"))
    assert answer_class(_obs(200), unknown) is AnswerClass.unknown_state


# --- when the window opens the breaker --------------------------------------------------

COUNTS = st.builds(
    lambda ok, s, t, u, d, r: WindowCounts(
        answers=ok + s + t + u + d + r,
        server_error=s,
        transport=t,
        unknown_state=u,
        denied=d,
        rate_limited=r,
    ),
    *(st.integers(0, 200) for _ in range(6)),
)


@given(COUNTS)
def test_the_breaker_never_opens_below_the_minimum_count(counts: WindowCounts) -> None:
    if counts.answers < POLICY.minimum_count:
        assert tripped(POLICY, counts) is None


@given(COUNTS)
def test_the_breaker_always_opens_at_or_over_a_threshold(counts: WindowCounts) -> None:
    over = counts.answers >= POLICY.minimum_count and any(
        n > 0 and n / counts.answers >= share
        for n, share in (
            (counts.server_error, POLICY.server_error_share),
            (counts.transport, POLICY.transport_share),
            (counts.unknown_state, POLICY.unknown_state_share),
            (counts.denied, POLICY.denied_share),
        )
    )
    rate = counts.answers >= POLICY.minimum_count and counts.rate_limited > POLICY.max_rate_limited
    assert (tripped(POLICY, counts) is not None) == (over or rate)


@given(st.integers(0, 500), st.integers(0, 500))
def test_429s_open_the_breaker_only_past_their_bound(ok: int, limited: int) -> None:
    counts = WindowCounts(answers=ok + limited, rate_limited=limited)
    why = tripped(POLICY, counts)
    if limited <= POLICY.max_rate_limited:
        assert why is None
    elif counts.answers >= POLICY.minimum_count:
        assert why is not None and why.reason is EscalationReason.rate_limited


@pytest.mark.parametrize(
    ("counts", "reason"),
    [
        (WindowCounts(answers=20, server_error=10), EscalationReason.provider_failure),
        (WindowCounts(answers=20, transport=10), EscalationReason.provider_failure),
        (WindowCounts(answers=20, unknown_state=10), EscalationReason.unknown_state),
        (WindowCounts(answers=20, denied=4), EscalationReason.authorization_denied),
        # A revoked credential is named first, whatever else fails with it.
        (
            WindowCounts(answers=20, denied=4, server_error=16),
            EscalationReason.authorization_denied,
        ),
    ],
)
def test_the_reason_names_the_kind_of_failure(
    counts: WindowCounts, reason: EscalationReason
) -> None:
    why = tripped(POLICY, counts)
    assert why is not None and why.reason is reason
    assert str(counts.answers) in describe(why, counts)


def test_the_evidence_names_counts_operations_and_bounded_samples() -> None:
    counts = WindowCounts(answers=20, server_error=20)
    why = tripped(POLICY, counts)
    assert why is not None
    said = HttpObservation(
        status_code=503,
        headers={"authorization": "Bearer s3cret"},
        body={"error": {"code": "unavailable", "message": "x" * 1000}},
        body_problem=None,
        transport_failure=None,
    )
    text = sample(said, AnswerClass.server_error, OP)
    assert text.startswith(f"{OP} server_error 503 unavailable") and len(text) <= 200
    assert "s3cret" not in text  # headers never go into a sample
    seen = evidence(POLICY, why, counts, first_failing="a", last_failing="b", samples=[text] * 9)
    assert seen["counts"]["server_error"] == 20
    assert (seen["first_failing_operation"], seen["last_failing_operation"]) == ("a", "b")
    assert len(seen["samples"]) == 5


# --- while it is open -----------------------------------------------------------------


def test_a_failure_while_open_spends_no_budget_and_escalates_nothing() -> None:
    op = operation(S.observing, transport_failures_used=3)
    exhausted = Decided(
        action=escalate(S.observing, EscalationReason.provider_failure, "transport failures"),
        changes={"transport_failures_used": 4, "consecutive_rate_limited": 0, "poll_attempt": 5},
    )
    out = not_counted(op, exhausted, NOW, wake=NOW + timedelta(seconds=30))
    assert isinstance(out.action, Move) and out.action.to is S.observing
    assert out.action.wake_at == NOW + timedelta(seconds=30)
    p = planned(op, out)
    assert "transport_failures_used" not in p.changes
    assert p.changes.get("state", S.observing) is S.observing


def test_the_hold_lets_only_its_probe_send() -> None:
    request = ProviderRequest(purpose=RequestPurpose.status, method="GET", url="http://x/j")
    send = Decided(action=Send(request=request, event=EventKind.poll_sent))
    hold = Hold(pause_id=PAUSE, author="rule:breaker", reason="r", started_at=NOW, probe=OP)
    probe = operation(S.observing, operation_id=OP, hold=hold, held_by=PAUSE)
    other = operation(S.observing, hold=hold, held_by=PAUSE, next_poll_at=NOW)
    assert held(probe, send, NOW) is send
    assert held(other, send, NOW) is not send


def test_the_probe_is_woken_now_and_stays_held() -> None:
    op = operation(S.observing, operation_id=OP, held_by=PAUSE, next_poll_at=None)
    out = probe_wake(op, PAUSE, INCIDENT, NOW)
    assert out is not None
    assert out.changes == {"next_poll_at": NOW, "dispatched_at": None}
    assert probe_wake(operation(S.observing, held_by=None), PAUSE, INCIDENT, NOW) is None


def test_the_snapshot_reads_the_probe_from_the_load_query() -> None:
    found = {
        "pause_id": str(PAUSE),
        "author": "rule:breaker",
        "reason": "r",
        "started_at": NOW.isoformat(),
        "probe": str(OP),
    }
    assert Hold.from_mapping(found).probe == OP
    assert Hold.from_mapping({**found, "probe": None}).probe is None
