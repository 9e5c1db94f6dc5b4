"""Waits after a pending answer: the contract's growth factor, the bound it puts on
detection delay, and polls aimed at the finish the reported progress implies."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.contracts.contract import DEFAULT_GROWTH_FACTOR, PollPolicy, RemoteStatus
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.polling.backoff import PollHint, RetryAfter
from jobwarden.models.polling.decisions import (
    DelaySource,
    Phase,
    PollView,
    Wait,
    decide_after_status,
)
from jobwarden.models.polling.estimates import FINISH_MARGIN
from jobwarden.models.provider.signals import HttpSignal, SignalKind, StatusReading, read_status

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"
FIXTURES = Path(__file__).resolve().parent / "contracts" / "valid"
NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
DEADLINE = NOW + timedelta(hours=3)
POLICY = PollPolicy(
    initial_delay_seconds=2.0,
    base_seconds=2.0,
    max_seconds=60.0,
    jitter_floor=0.5,
    hint_floor_seconds=1.0,
    hint_cap_seconds=300.0,
    rate_limit_base_seconds=10.0,
    max_rate_limited=5,
    growth_factor=1.25,
)
FLOOR = 1.0  # max(hint_floor_seconds, jitter_floor * base_seconds)


def view(
    *,
    age: float = 600.0,
    attempt: int = 40,
    phase: Phase = Phase.observing,
    finish_in: float | None = None,
    progress: float | None = None,
) -> PollView:
    """``finish_in``: the finish the previous reading implied, seconds after NOW;
    ``progress``: that reading's progress."""
    return PollView(
        phase=phase,
        deadline=DEADLINE,
        accepted_at=NOW - timedelta(seconds=age),
        status_requests_used=3,
        max_status_requests=1000,
        transport_failures_used=0,
        max_transport_failures=3,
        consecutive_rate_limited=0,
        poll_attempt=attempt,
        next_poll_at=None,
        progress=progress,
        estimated_finish=None if finish_in is None else NOW + timedelta(seconds=finish_in),
    )


def signal(kind: SignalKind = SignalKind.ok, *, retry_after: float | None = None) -> HttpSignal:
    return HttpSignal(
        kind=kind,
        status_code=200 if kind is SignalKind.ok else 503,
        retry_after=RetryAfter(seconds=retry_after, problem=None),
        location=None,
        transport_failure=None,
    )


def pending(
    progress: float | None = None, *, started: float | None = None, hint: float | None = None
) -> StatusReading:
    """A pending reading; ``started`` is seconds before NOW (negative: in our future)."""
    return StatusReading(
        remote_status=RemoteStatus.pending,
        raw_state="Running",
        progress=progress,
        poll_hint=PollHint(seconds=hint, problem=None),
        expires_at=None,
        result_ref=None,
        error=None,
        contradiction=None,
        started_at=None if started is None else NOW - timedelta(seconds=started),
    )


def wait_after(
    read: StatusReading | None,
    *,
    v: PollView | None = None,
    policy: PollPolicy = POLICY,
    sig: HttpSignal | None = None,
    u: float = 1.0,
    now: datetime = NOW,
) -> Wait:
    decision = decide_after_status(
        v or view(),
        policy,
        sig or signal(),
        read,
        now=now,
        u=u,
        not_found_allowed=False,
    )
    assert isinstance(decision.action, Wait)
    return decision.action


# --- the growth factor -------------------------------------------------------------


def test_the_default_growth_factor_is_the_one_the_benchmark_chose() -> None:
    assert DEFAULT_GROWTH_FACTOR == 1.25
    for path in SHIPPED.glob("*.toml"):
        # The shipped contracts take the default, so a retuned default reaches them.
        assert load_contract(path).poll.growth_factor == DEFAULT_GROWTH_FACTOR, path.name


@pytest.mark.parametrize("growth", [1.05, 1.25, 1.5, 2.0, 4.0])
def test_a_pending_answer_grows_the_wait_by_the_contracts_factor(growth: float) -> None:
    policy = replace(POLICY, growth_factor=growth, max_seconds=1e6)
    delays = [
        wait_after(pending(), v=view(age=1e6, attempt=n), policy=policy).delay_seconds
        for n in range(4)
    ]
    assert delays == pytest.approx([2.0 * growth**n for n in range(4)])


def test_a_failed_status_read_still_doubles_whatever_the_growth_factor() -> None:
    # A provider that answers 503 is waited out, not asked again sooner.
    delays = [
        wait_after(None, v=view(attempt=n), sig=signal(SignalKind.server_error)).delay_seconds
        for n in range(4)
    ]
    assert delays == [2.0, 4.0, 8.0, 16.0]


@pytest.mark.parametrize(
    ("age", "expected"),
    [
        (2.0, 2.0),  # a young job: never below base_seconds
        (20.0, 5.0),  # 25 % of 20 s
        (100.0, 25.0),
        (10_000.0, 60.0),  # max_seconds
    ],
)
def test_a_wait_after_a_pending_answer_is_at_most_the_factors_share_of_the_jobs_age(
    age: float, expected: float
) -> None:
    wait = wait_after(pending(), v=view(age=age, attempt=60))
    assert wait.delay_seconds == pytest.approx(expected)
    assert wait.delay_source is DelaySource.local_backoff


@given(
    age=st.floats(min_value=0, max_value=1e6),
    attempt=st.integers(0, 10**4),
    growth=st.floats(min_value=1.05, max_value=4.0),
    u=st.floats(0, 1),
    progress=st.none() | st.floats(min_value=0, max_value=100),
    started=st.none() | st.floats(min_value=-1e5, max_value=1e6),
)
def test_a_finished_job_is_found_at_most_growth_minus_one_of_its_age_late(
    age: float,
    attempt: int,
    growth: float,
    u: float,
    progress: float | None,
    started: float | None,
) -> None:
    # Without provider delays, the next poll after a pending answer comes within
    # max(base, (growth - 1) x age): a job finishing right after this poll is found
    # that late at most. A factor of 2 hard-coded breaks this for any growth < 2.
    policy = replace(POLICY, growth_factor=growth)
    v = view(age=age, attempt=attempt)
    wait = wait_after(pending(progress, started=started), v=v, policy=policy, u=u)
    age = (NOW - v.accepted_at).total_seconds()  # as stored: whole microseconds
    bound = min(policy.max_seconds, max(policy.base_seconds, (growth - 1) * age))
    assert wait.delay_seconds <= bound * (1 + 1e-9)


def test_the_growth_bound_does_not_apply_to_a_cancel_awaiting_confirmation() -> None:
    # The job's age says nothing about how soon a cancel is confirmed.
    wait = wait_after(pending(), v=view(age=20.0, attempt=3, phase=Phase.cancelling))
    assert wait.delay_seconds == pytest.approx(2.0 * 1.25**3)


# --- aiming at the finish ------------------------------------------------------------


@pytest.mark.parametrize(
    ("progress", "started", "expected", "source"),
    [
        # 50 % in 20 s: 20 s to go, plus the margin of the 40 s the job takes.
        (50.0, 20.0, 20.0 + 40 * FINISH_MARGIN, DelaySource.progress_estimate),
        (90.0, 90.0, 10.0 + 100 * FINISH_MARGIN, DelaySource.progress_estimate),
        # 400 s to go: beyond max_seconds (60 s) and the backoff's ceiling, as far as the
        # finish, which is where the two readings agree the job ends.
        (20.0, 100.0, 400.0 + 500 * FINISH_MARGIN, DelaySource.progress_estimate),
        (99.0, 10.0, FLOOR, DelaySource.progress_estimate),  # 0.1 s to go: the floor
        (None, 20.0, 60.0, DelaySource.local_backoff),
        (0.0, 20.0, 60.0, DelaySource.local_backoff),  # not started
        (100.0, 20.0, 60.0, DelaySource.local_backoff),  # finalizing: progress says nothing
    ],
)
def test_progress_two_readings_agree_on_aims_the_next_poll_just_past_the_finish(
    progress: float | None, started: float | None, expected: float, source: DelaySource
) -> None:
    remaining = None
    if progress is not None and 0 < progress < 100 and started is not None:
        remaining = started * (100 - progress) / progress
    # The previous reading implied the same finish, at a lower progress.
    v = view(finish_in=remaining, progress=1.0 if remaining is not None else None)
    wait = wait_after(pending(progress, started=started), v=v)
    assert wait.delay_seconds == pytest.approx(expected)
    assert wait.delay_source is source
    if source is DelaySource.progress_estimate:
        assert wait.estimated_finish == NOW + timedelta(seconds=remaining or 0.0)
        assert wait.evidence is not None and "%/s" in wait.evidence


@pytest.mark.parametrize(
    ("previous_finish_in", "previous_progress", "why"),
    [
        (None, None, "the first reading is a guess"),
        (20.0 + 0.11 * 40, 10.0, "the last reading's finish was 11 % of the duration later"),
        (20.0 - 0.11 * 40, 10.0, "... or earlier"),
        (20.0, 50.0, "progress did not move: a stall"),
        (20.0, 60.0, "progress went back"),
    ],
)
def test_a_reading_that_breaks_the_pace_leaves_the_backoff_in_charge(
    previous_finish_in: float | None, previous_progress: float | None, why: str
) -> None:
    v = view(finish_in=previous_finish_in, progress=previous_progress)
    wait = wait_after(pending(50.0, started=20.0), v=v, u=0.0)
    assert wait.delay_source is DelaySource.local_backoff, why
    assert wait.delay_seconds == pytest.approx(30.0)  # min(60, 0.25 x 600 s) at u = 0
    assert wait.estimated_finish is None


def test_a_job_speeding_up_is_not_aimed_at_the_finish_its_average_pace_promises() -> None:
    # 50 % after 20 s, and 42 % 2 s ago: the averages say 40 s and 42.9 s in all (within
    # 10 %), but 8 % in 2 s says 6.25 s to go, not 20: aiming at 40 s would be 14 s late.
    v = view(finish_in=(20 / 0.42 - 20), progress=42.0)
    wait = wait_after(pending(50.0, started=20.0), v=v)
    assert wait.delay_source is DelaySource.local_backoff


@pytest.mark.parametrize(
    ("started", "remaining"),
    [
        (50.0, 50 / 9),  # the provider's start, after our acceptance
        (None, 100 / 9),  # no start given: our acceptance, 100 s ago
        (-30.0, 100 / 9),  # a start in our future: clock skew, ignored
        (3600.0, 100 / 9),  # before we asked: never earlier than that
    ],
)
def test_the_estimate_counts_from_the_providers_start_within_our_own_bounds(
    started: float | None, remaining: float
) -> None:
    v = replace(view(age=100.0, finish_in=remaining, progress=80.0))
    wait = wait_after(pending(90.0, started=started), v=v)
    start = min(100.0, started) if started is not None and started > 0 else 100.0
    assert wait.delay_seconds == pytest.approx(remaining + (start + remaining) * FINISH_MARGIN)
    assert wait.delay_source is DelaySource.progress_estimate


def test_two_provider_etas_that_agree_aim_just_past_them() -> None:
    eta = NOW + timedelta(seconds=300)
    read = replace(pending(), eta=eta)
    wait = wait_after(read, v=view(age=600.0, finish_in=310.0))
    assert wait.delay_source is DelaySource.provider_eta
    assert wait.delay_seconds == pytest.approx(300 + 900 * FINISH_MARGIN)
    assert wait.estimated_finish == eta
    # The provider moved it by more than a tenth of the job's duration: backoff.
    moved = wait_after(read, v=view(age=600.0, finish_in=200.0))
    assert moved.delay_source is DelaySource.local_backoff


def test_an_aimed_poll_never_goes_past_the_expiry_the_provider_announced() -> None:
    read = replace(pending(50.0, started=1000.0), expires_at=NOW + timedelta(seconds=100))
    wait = wait_after(read, v=view(age=1000.0, finish_in=1000.0, progress=40.0))
    assert wait.delay_source is DelaySource.progress_estimate
    assert wait.delay_seconds == pytest.approx(100.0)


@pytest.mark.parametrize(
    ("retry_after", "hint", "expected", "source"),
    [
        # The estimate alone would say 21.2 s; the provider's word decides, sooner or later,
        # so the wait stays remembered as the provider's past a person's early wake-up.
        (30.0, None, 30.0, DelaySource.provider_retry_after),
        (5.0, None, 5.0, DelaySource.provider_retry_after),
        (None, 30.0, 30.0, DelaySource.provider_poll_hint),
        (None, 5.0, 5.0, DelaySource.provider_poll_hint),
        (None, 0.2, 1.0, DelaySource.provider_poll_hint),  # raised to the hint floor
        (600.0, None, 600.0, DelaySource.provider_retry_after),  # above max: the provider wins
    ],
)
def test_a_progress_estimate_never_replaces_the_providers_delay(
    retry_after: float | None, hint: float | None, expected: float, source: DelaySource
) -> None:
    v = view(finish_in=20.0, progress=40.0)
    read = pending(50.0, started=20.0, hint=hint)
    wait = wait_after(read, v=v, sig=signal(retry_after=retry_after))
    assert wait.delay_seconds == pytest.approx(expected)
    assert wait.delay_source is source


def test_progress_is_not_used_while_a_cancel_awaits_confirmation() -> None:
    v = view(phase=Phase.cancelling, finish_in=20.0, progress=40.0)
    wait = wait_after(pending(50.0, started=20.0), v=v)
    assert wait.delay_source is DelaySource.local_backoff


@given(
    progress=st.none() | st.floats(min_value=-10, max_value=110),
    previous=st.none() | st.floats(min_value=-10, max_value=110),
    started=st.none() | st.floats(min_value=-1e5, max_value=1e7),
    finish_in=st.none() | st.floats(min_value=-1e5, max_value=1e7),
    eta_in=st.none() | st.floats(min_value=-1e5, max_value=1e7),
    retry_after=st.none() | st.floats(min_value=0, max_value=1e5),
    hint=st.none() | st.floats(min_value=0, max_value=1e4),
    age=st.floats(min_value=0, max_value=1e6),
    attempt=st.integers(0, 200),
    u=st.floats(0, 1),
    to_deadline=st.floats(min_value=0.001, max_value=1e5),
)
def test_every_aimed_wait_stays_between_the_floor_the_deadline_and_the_provider(
    *,
    progress: float | None,
    previous: float | None,
    started: float | None,
    finish_in: float | None,
    eta_in: float | None,
    retry_after: float | None,
    hint: float | None,
    age: float,
    attempt: int,
    u: float,
    to_deadline: float,
) -> None:
    v = replace(
        view(age=age, attempt=attempt, finish_in=finish_in, progress=previous),
        deadline=NOW + timedelta(seconds=to_deadline),
    )
    read = pending(progress, started=started, hint=hint)
    if eta_in is not None:
        read = replace(read, eta=NOW + timedelta(seconds=eta_in))
    wait = wait_after(read, v=v, sig=signal(retry_after=retry_after), u=u)
    assert NOW < wait.until <= v.deadline
    assert wait.delay_seconds <= (v.deadline - NOW).total_seconds() + 1e-9
    provider = retry_after if retry_after is not None else hint
    aimed = wait.delay_source in (DelaySource.progress_estimate, DelaySource.provider_eta)
    if provider is not None:
        # Invariant 3: never before the provider asked, estimate or not.
        assert not aimed
        if not wait.clipped_to_deadline:
            assert wait.delay_seconds >= max(provider, POLICY.hint_floor_seconds)
    if aimed:
        assert finish_in is not None  # never on one reading alone
        assert wait.estimated_finish is not None
        if wait.delay_source is DelaySource.progress_estimate:
            assert progress is not None and 0 < progress < 100
            assert previous is None or previous < progress  # never on a stall
        if not wait.clipped_to_deadline:
            assert wait.delay_seconds >= FLOOR  # no burst, however early the estimate
    elif provider is None:
        assert wait.delay_seconds <= POLICY.max_seconds


# --- reading the start ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-05-01T11:59:00Z", NOW - timedelta(minutes=1)),
        ("2024-05-01T13:59:00+02:00", NOW - timedelta(minutes=1)),
        (1714564740, NOW - timedelta(minutes=1)),  # Unix seconds, as OpenAI's in_progress_at
        ("yesterday", None),
        (None, None),
        (True, None),
    ],
)
def test_the_start_is_read_at_the_contracts_pointer(
    value: object, expected: datetime | None
) -> None:
    contract = load_contract(FIXTURES / "operation_location.toml")
    assert contract.status.started_at_pointer == "/startTime"  # ARM's async operation format
    body = {"status": "Running", "percentComplete": 40, "startTime": value}
    reading = read_status(contract, body, now=NOW, deadline=DEADLINE)
    assert reading.progress == 40
    assert reading.started_at == expected


def test_a_sandbox_status_read_through_the_shipped_contract_aims_at_the_finish() -> None:
    contract = load_contract(SHIPPED / "sandbox.toml")
    body = {"status": "running", "progress": 95, "started_at": "2024-05-01T11:59:40Z"}
    reading = read_status(contract, body, now=NOW, deadline=DEADLINE)
    remaining = 20 * 5 / 95  # 95 % done in 20 s
    v = view(age=20.0, attempt=40, finish_in=remaining, progress=80.0)
    wait = wait_after(reading, policy=contract.poll, v=v)
    assert wait.delay_source is DelaySource.progress_estimate
    assert wait.delay_seconds == pytest.approx(remaining + (20 + remaining) * FINISH_MARGIN)
