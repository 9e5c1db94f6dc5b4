"""The provider rate limit's pure half: the [rate_limit] table, and a refused token's wait."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.actions import (
    Decided,
    DelaySource,
    ProviderRequest,
    RequestPurpose,
    Send,
    Wait,
)
from jobwarden.models.contracts.contract import RateLimit
from jobwarden.models.contracts.fields import MAX_SECONDS
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.effects import plan
from jobwarden.models.errors import ContractError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.provider.rate_limits import credential_reference, granted, rate_limited
from jobwarden.models.reservations import settled
from jobwarden.models.states import OperationState as S
from tests.unit.factories import NOW, SHIPPED, operation

SANDBOX = (SHIPPED / "sandbox.toml").read_text()


def _send(
    deadline_in: float | None = 60.0, purpose: RequestPurpose = RequestPurpose.status
) -> Send:
    return Send(
        request=ProviderRequest(purpose=purpose, method="GET", url="http://x/v1/jobs/j"),
        event=EventKind.poll_sent,
        counters={"status_requests_used": 1},
        deadline=None if deadline_in is None else NOW + timedelta(seconds=deadline_in),
    )


def _contract(tmp_path: Path, table: str) -> RateLimit | None:
    path = tmp_path / "sandbox.toml"
    path.write_text(SANDBOX.replace("[limits]", table + "\n[limits]", 1))
    return load_contract(path).rate_limit


# --- the contract table ---------------------------------------------------------------


def test_a_contract_without_a_rate_limit_table_has_no_limit() -> None:
    path = SHIPPED / "sandbox.toml"
    assert load_contract(path).rate_limit is None


def test_a_rate_limit_table_is_read_with_its_burst(tmp_path: Path) -> None:
    limit = _contract(tmp_path, "[rate_limit]\nrequests_per_second = 5\nburst = 2\n")
    assert limit == RateLimit(requests_per_second=5.0, burst=2)


def test_the_burst_defaults_to_one_request(tmp_path: Path) -> None:
    limit = _contract(tmp_path, "[rate_limit]\nrequests_per_second = 0.5\n")
    assert limit == RateLimit(requests_per_second=0.5, burst=1)


@pytest.mark.parametrize(
    ("table", "field", "problem"),
    [
        ("burst = 2", "rate_limit.requests_per_second", "required"),
        ("requests_per_second = 0", "rate_limit.requests_per_second", "must be above 0"),
        ("requests_per_second = -1", "rate_limit.requests_per_second", "must be above 0"),
        ("requests_per_second = nan", "rate_limit.requests_per_second", "must be above 0"),
        ("requests_per_second = 1e9", "rate_limit.requests_per_second", "at most 10000"),
        ('requests_per_second = "5"', "rate_limit.requests_per_second", "must be a number"),
        ("requests_per_second = true", "rate_limit.requests_per_second", "must be a number"),
        ("requests_per_second = 5\nburst = 0", "rate_limit.burst", "positive whole number"),
        ("requests_per_second = 5\nburst = 1.5", "rate_limit.burst", "whole number"),
        ("requests_per_second = 5\nper_minute = 3", "rate_limit.per_minute", "unknown"),
    ],
)
def test_a_bad_rate_limit_is_refused_naming_its_field(
    tmp_path: Path, table: str, field: str, problem: str
) -> None:
    with pytest.raises(ContractError) as caught:
        _contract(tmp_path, f"[rate_limit]\n{table}\n")
    assert caught.value.field == field
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("secret_env", "secret_file", "reference"),
    [
        ("SANDBOX_TOKEN", None, "env:SANDBOX_TOKEN"),
        (None, "/run/secrets/token", "file:/run/secrets/token"),
        (None, None, "anonymous"),
    ],
)
def test_the_limit_counts_against_the_credential_s_reference(
    secret_env: str | None, secret_file: str | None, reference: str
) -> None:
    assert credential_reference(secret_env, secret_file) == reference


# --- a refused token ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retry_after", "deadline_in", "delay", "clipped"),
    [
        (0.2, 60.0, 0.2, False),  # the usual case: ask again at the next free token
        (0.0, 60.0, 0.0, False),
        (-1.0, 60.0, 0.0, False),  # a clock step in Redis never makes a wait negative
        (90.0, 60.0, 60.0, True),  # past the deadline: the deadline stop takes over then
        (60.0, 60.0, 60.0, True),
        (5.0, -3.0, 0.0, True),  # the deadline already passed: wake now, and stop
        (1e300, None, 30 * 24 * 3600, False),  # no deadline (a cancel): bounded, no overflow
    ],
)
def test_a_refused_token_becomes_a_local_rate_limit_wait(
    retry_after: float, deadline_in: float | None, delay: float, clipped: bool
) -> None:
    decided = rate_limited(
        Decided(action=_send(deadline_in)), _send(deadline_in), retry_after=retry_after, now=NOW
    )
    wait = decided.action
    assert isinstance(wait, Wait)
    assert wait.delay_source is DelaySource.local_rate_limit
    assert wait.delay_seconds == pytest.approx(delay)
    assert wait.until == NOW + timedelta(seconds=wait.delay_seconds)
    assert wait.clipped_to_deadline is clipped
    assert "rate limit" in wait.cause


def test_a_refused_token_keeps_what_the_decision_read_and_counted() -> None:
    decided = Decided(
        action=_send(), changes={"transport_failures_used": 2}, seen={"x": 1}, answered="lookup"
    )
    held = rate_limited(decided, _send(), retry_after=1.0, now=NOW)
    assert (held.changes, held.seen, held.answered) == (decided.changes, decided.seen, "lookup")


@given(
    retry_after=st.floats(min_value=-1e6, max_value=1e12, allow_nan=False),
    deadline_in=st.one_of(st.none(), st.floats(min_value=-1e5, max_value=1e7)),
)
def test_a_rate_limit_wait_never_passes_the_deadline_nor_comes_before_now(
    retry_after: float, deadline_in: float | None
) -> None:
    send = _send(deadline_in)
    wait = rate_limited(Decided(action=send), send, retry_after=retry_after, now=NOW).action
    assert isinstance(wait, Wait)
    assert wait.until >= NOW
    if send.deadline is not None:
        assert wait.until <= max(NOW, send.deadline)
        # Shortened only by the deadline (and the 30-day sanity bound): otherwise the
        # limiter's whole answer is waited.
        if not wait.clipped_to_deadline:
            expected = min(max(0.0, retry_after), float(MAX_SECONDS))
            assert wait.delay_seconds == pytest.approx(expected)


def test_a_held_poll_records_a_decision_and_counts_no_request() -> None:
    """Nothing was claimed: no poll_sent, the counter unchanged, the timer at the token."""
    op = operation(S.observing, remote_job_id="j", status_url="http://x/v1/jobs/j")
    send = _send()
    held = rate_limited(Decided(action=send), send, retry_after=0.4, now=NOW)
    p = settled(op, plan(op, held, actor="worker:t", now=NOW, answer=None, max_countdown=30))
    assert [e.kind for e in p.events] == [EventKind.decision]
    assert p.events[0].delay_source == "local_rate_limit"
    assert p.next_at == NOW + timedelta(seconds=0.4)
    # A wait in a polled state reserves the next request, counted once, as any wait does.
    assert p.changes["status_requests_used"] == op.status_requests_used + 1
    assert "poll_not_before" not in p.changes  # only the provider's own delays are kept


def test_a_held_poll_keeps_a_reservation_it_already_holds() -> None:
    op = operation(
        S.observing,
        remote_job_id="j",
        status_url="http://x/v1/jobs/j",
        status_requests_used=3,
        reserved_request=3,
    )
    send = _send()
    held = rate_limited(Decided(action=send), send, retry_after=0.4, now=NOW)
    p = settled(op, plan(op, held, actor="worker:t", now=NOW, answer=None, max_countdown=30))
    assert "status_requests_used" not in p.changes
    assert "reserved_request" not in p.changes


def test_a_granted_request_records_the_limiters_grant_time_on_its_claim() -> None:
    # The claim event of the request says when the shared limiter let it go (its clock),
    # so the history alone shows that one credential's requests kept its rate.
    op = operation(S.observing, remote_job_id="j", status_url="http://x/v1/jobs/j")
    at = NOW.timestamp() + 0.25
    send = granted(_send(), at)
    p = plan(op, Decided(action=send), actor="worker:t", now=NOW, answer=None, max_countdown=30)
    (claim,) = p.events
    assert claim.kind is EventKind.poll_sent
    assert claim.excerpt == {"rate_limit_granted_at": (NOW + timedelta(seconds=0.25)).isoformat()}
    # No limit, no grant time: nothing added.
    assert granted(_send(), None) == _send()
