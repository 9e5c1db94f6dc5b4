"""The finish a status reading implies, and when two readings agree on it (issue 38):
progress, item counts and a provider's ETA, read as evidence, never trusted blindly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.polling.estimates import (
    FINISH_MARGIN,
    PACE_TOLERANCE,
    Disagreement,
    FinishEstimate,
    agreement,
    aim,
    estimate_finish,
    progress_step,
)
from jobwarden.models.provider.pointers import MISSING
from jobwarden.models.provider.signals import item_progress, read_status

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"
NOW = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)
ACCEPTED = NOW - timedelta(seconds=100)


def _at(seconds: float | None) -> datetime | None:
    """Seconds after NOW (negative: before it)."""
    return None if seconds is None else NOW + timedelta(seconds=seconds)


# --- one reading's estimate ------------------------------------------------------------


@pytest.mark.parametrize(
    ("progress", "started", "eta", "finish_in", "from_eta"),
    [
        (50.0, None, None, 100.0, False),  # from our acceptance, 100 s ago
        (50.0, -40.0, None, 40.0, False),  # from the provider's start, 40 s ago
        (25.0, -40.0, None, 120.0, False),
        (0.001, -10.0, None, 10.0 * (100 - 0.001) / 0.001, False),  # a slow start: far away
        # Clock skew: a start in our future, or before our acceptance, is not believed.
        (50.0, 30.0, None, 100.0, False),
        (50.0, -500.0, None, 100.0, False),
        # Progress that says nothing: not started, done working but not finished, nonsense.
        (0.0, -40.0, None, None, False),
        (100.0, -40.0, None, None, False),
        (-5.0, -40.0, None, None, False),
        (120.0, -40.0, None, None, False),
        (float("nan"), -40.0, None, None, False),
        (float("inf"), -40.0, None, None, False),
        (None, -40.0, None, None, False),
        # The provider's ETA wins while it lies ahead of us ...
        (50.0, -40.0, 300.0, 300.0, True),
        (None, None, 5.0, 5.0, True),
        # ... and one already past (a late job, or the provider's clock behind ours) is no
        # evidence: progress, if any, speaks instead.
        (None, None, -5.0, None, False),
        (50.0, -40.0, -5.0, 40.0, False),
        (None, None, 0.0, None, False),
    ],
)
def test_one_reading_implies_a_finish_only_from_sound_evidence(
    progress: float | None,
    started: float | None,
    eta: float | None,
    finish_in: float | None,
    from_eta: bool,
) -> None:
    found = estimate_finish(
        progress=progress, started_at=_at(started), eta=_at(eta), accepted_at=ACCEPTED, now=NOW
    )
    if finish_in is None:
        assert found is None
        return
    assert found is not None
    assert found.finish == NOW + timedelta(seconds=finish_in)
    assert found.from_eta is from_eta


def test_no_time_since_the_start_implies_no_finish() -> None:
    assert (
        estimate_finish(progress=50.0, started_at=NOW, eta=None, accepted_at=NOW, now=NOW) is None
    )


def test_a_pace_too_slow_to_end_before_year_9999_implies_no_finish() -> None:
    found = estimate_finish(
        progress=1e-300, started_at=None, eta=None, accepted_at=ACCEPTED, now=NOW
    )
    assert found is None


# --- item counts (OpenAI Batch request_counts) -------------------------------------------


@pytest.mark.parametrize(
    ("completed", "failed", "total", "expected"),
    [
        (25, 0, 100, 25.0),
        (20, 5, 100, 25.0),  # a failed request is processed too
        (25, MISSING, 100, 25.0),  # no failed count given
        (25, None, 100, 25.0),
        (0, 0, 100, 0.0),
        (100, 0, 100, 100.0),
        (90, 20, 100, None),  # counts beyond the total: the provider contradicts itself
        (101, 0, 100, None),
        (1, 0, 0, None),  # no total
        (0, 0, 0, None),
        (-1, 0, 100, None),
        (1.5, 0, 100, None),  # not a count
        ("25", 0, 100, None),
        (True, 0, 100, None),
        (25, -3, 100, None),
        (MISSING, 0, 100, None),
        (25, 0, MISSING, None),
    ],
)
def test_item_counts_are_progress_only_when_they_add_up(
    completed: object, failed: object, total: object, expected: float | None
) -> None:
    assert item_progress(completed, failed, total) == expected


def test_the_openai_batch_convention_reads_request_counts_and_its_start_as_progress() -> None:
    contract = load_contract(SHIPPED / "openai_batch.toml")
    body = {
        "id": "batch_1",
        "status": "in_progress",
        "in_progress_at": int((NOW - timedelta(seconds=60)).timestamp()),
        "expires_at": int((NOW + timedelta(hours=23)).timestamp()),
        "request_counts": {"total": 1000, "completed": 240, "failed": 10},
    }
    reading = read_status(contract, body, now=NOW, deadline=NOW + timedelta(days=1))
    assert reading.progress == 25.0
    assert reading.started_at == NOW - timedelta(seconds=60)
    body["request_counts"] = {"total": 1000, "completed": 990, "failed": 20}
    reading = read_status(contract, body, now=NOW, deadline=NOW + timedelta(days=1))
    assert reading.progress is None


def test_the_sandbox_contract_reads_the_providers_eta() -> None:
    contract = load_contract(SHIPPED / "sandbox.toml")
    body = {"status": "running", "estimated_completion_time": "2026-12-06T12:05:00Z"}
    reading = read_status(contract, body, now=NOW, deadline=NOW + timedelta(days=1))
    assert reading.eta == NOW + timedelta(minutes=5)


# --- two readings ----------------------------------------------------------------------


def _progress_estimate(finish_in: float, *, duration: float = 200.0) -> FinishEstimate:
    finish = NOW + timedelta(seconds=finish_in)
    return FinishEstimate(
        finish=finish, start=finish - timedelta(seconds=duration), from_eta=False, pace=0.5
    )


@pytest.mark.parametrize(
    ("previous_in", "previous_progress", "progress", "expected"),
    [
        # This reading: 50 % after 100 s, a finish 100 s from now (200 s in all).
        (100.0, 40.0, 50.0, None),  # 40 % 20 s ago: the same pace all along
        (100.0, 10.0, 50.0, None),  # 10 % 80 s ago: the same
        (100.0 + 20.001, 40.0, 50.0, Disagreement.pace_changed),  # moved > 10 % of 200 s
        (100.0 - 20.001, 40.0, 50.0, Disagreement.pace_changed),
        # Speeding up: 42 % 10 s ago implied a finish 14 s later, within the tolerance,
        # but 8 % in the last 10 s implies one 37.5 s sooner: the average is not the pace.
        (114.2857, 42.0, 50.0, Disagreement.pace_changed),
        (100.0, 50.0, 50.0, Disagreement.stalled),
        (100.0, 60.0, 50.0, Disagreement.jumped_back),
        (None, None, 50.0, Disagreement.first_reading),
        (None, 40.0, 50.0, Disagreement.first_reading),
        # A finish without the progress it came from: when it was read is unknown.
        (100.0, None, 50.0, Disagreement.first_reading),
        (100.0, 0.0, 50.0, Disagreement.first_reading),
    ],
)
def test_two_progress_readings_agree_when_they_and_the_pace_between_them_imply_one_finish(
    previous_in: float | None,
    previous_progress: float | None,
    progress: float,
    expected: Disagreement | None,
) -> None:
    assert PACE_TOLERANCE == 0.10
    found = agreement(
        _progress_estimate(100.0),
        previous_finish=_at(previous_in),
        previous_progress=previous_progress,
        progress=progress,
        step=0.01,  # a provider reporting hundredths of a percent
    )
    assert found is expected


@pytest.mark.parametrize(
    ("previous_progress", "progress", "step", "expected"),
    [
        # Whole percents (the step read from the values): 8 steps measure no pace within
        # 10 %; 10 do.
        (42.0, 50.0, None, Disagreement.unresolved),
        (40.0, 50.0, None, None),
        (49.92, 50.0, None, Disagreement.unresolved),  # hundredths: 8 steps
        (49.89, 50.0, None, None),  # 11 of them (a round 50.0 is in hundredths too)
        # Item counts say their own step: one item of 1,000 is 0.1 %.
        (49.5, 50.0, 0.1, Disagreement.unresolved),
        (49.0, 50.0, 0.1, None),
    ],
)
def test_progress_must_move_by_ten_of_its_steps_before_its_pace_is_believed(
    previous_progress: float, progress: float, step: float | None, expected: Disagreement | None
) -> None:
    # Both readings on one steady pace: 0.5 %/s from 100 s ago.
    current = _progress_estimate(100.0)
    found = agreement(
        current,
        previous_finish=current.finish,
        previous_progress=previous_progress,
        progress=progress,
        step=step,
    )
    assert found is expected


@pytest.mark.parametrize(
    ("value", "step"), [(50.0, 1.0), (12.5, 0.1), (12.3457, 0.0001), (0.003, 0.001), (1 / 3, 1e-6)]
)
def test_the_step_of_a_percentage_is_read_from_its_decimals(value: float, step: float) -> None:
    assert progress_step(value) == pytest.approx(step)


@pytest.mark.parametrize(
    ("previous_in", "expected"),
    [
        (300.0, None),
        (300.0 + 40.0, None),  # exactly 10 % of the 400 s from acceptance to the ETA
        (300.0 - 40.0, None),
        (300.0 + 40.001, Disagreement.eta_moved),
        (300.0 - 40.001, Disagreement.eta_moved),
        (None, Disagreement.first_reading),
    ],
)
def test_two_provider_etas_agree_within_a_tenth_of_the_duration(
    previous_in: float | None, expected: Disagreement | None
) -> None:
    eta = estimate_finish(
        progress=None, started_at=None, eta=_at(300.0), accepted_at=ACCEPTED, now=NOW
    )
    assert eta is not None and eta.from_eta
    found = agreement(eta, previous_finish=_at(previous_in), previous_progress=None, progress=None)
    assert found is expected


def test_a_provider_eta_that_moved_breaks_the_agreement_and_one_that_held_keeps_it() -> None:
    eta = FinishEstimate(
        finish=NOW + timedelta(seconds=300), start=ACCEPTED, from_eta=True, pace=None
    )
    assert agreement(eta, previous_finish=eta.finish, previous_progress=None, progress=None) is None
    moved = eta.finish - timedelta(seconds=100)
    found = agreement(eta, previous_finish=moved, previous_progress=None, progress=None)
    assert found is Disagreement.eta_moved


def test_an_aim_lies_just_past_the_finish_and_never_past_an_announced_expiry() -> None:
    estimate = _progress_estimate(100.0, duration=200.0)
    assert aim(estimate) == estimate.finish + timedelta(seconds=200 * FINISH_MARGIN)
    expiry = NOW + timedelta(seconds=50)
    assert aim(estimate, expires_at=expiry) == expiry
    assert aim(estimate, expires_at=NOW + timedelta(days=1)) == aim(estimate)


# --- properties ------------------------------------------------------------------------

_seconds = st.floats(min_value=-1e7, max_value=1e7, allow_nan=False)


@given(
    progress=st.none() | st.floats(allow_nan=True, allow_infinity=True),
    started=st.none() | _seconds,
    eta=st.none() | _seconds,
    age=st.floats(min_value=0, max_value=1e7),
)
def test_an_estimate_never_lies_in_the_past_nor_counts_from_outside_what_we_saw(
    progress: float | None, started: float | None, eta: float | None, age: float
) -> None:
    accepted = NOW - timedelta(seconds=age)
    found = estimate_finish(
        progress=progress, started_at=_at(started), eta=_at(eta), accepted_at=accepted, now=NOW
    )
    if found is None:
        return
    assert found.finish >= NOW
    assert accepted <= found.start <= NOW
    if not found.from_eta:
        assert progress is not None and 0 < progress < 100
        assert found.pace is not None and found.pace > 0


@given(
    skew=st.floats(min_value=-86400, max_value=86400),
    progress=st.floats(min_value=0.5, max_value=99.5),
    age=st.floats(min_value=1, max_value=1e6),
)
def test_a_start_the_provider_skewed_outside_what_we_saw_counts_from_our_acceptance(
    skew: float, progress: float, age: float
) -> None:
    # The provider's clock is off: its start lies in our future or before we accepted
    # the job. Either way we count from our own acceptance, the one start we saw.
    accepted = NOW - timedelta(seconds=age)
    started = (
        NOW + timedelta(seconds=abs(skew) + 1e-3)
        if skew >= 0
        else accepted + timedelta(seconds=skew - 1e-3)
    )
    found = estimate_finish(
        progress=progress, started_at=started, eta=None, accepted_at=accepted, now=NOW
    )
    assert found is not None
    assert found.start == accepted


@given(
    skew=st.floats(min_value=-3600, max_value=3600),
    ahead=st.floats(min_value=1, max_value=1e6),
)
def test_a_provider_eta_that_holds_still_agrees_whatever_the_skew_of_its_clock(
    skew: float, ahead: float
) -> None:
    # A constant skew shifts both readings' ETA alike: only a moving ETA breaks the pace.
    eta = NOW + timedelta(seconds=ahead + abs(skew))
    first = estimate_finish(progress=None, started_at=None, eta=eta, accepted_at=ACCEPTED, now=NOW)
    later = NOW + timedelta(seconds=min(ahead, 1.0) / 2)
    second = estimate_finish(
        progress=None, started_at=None, eta=eta, accepted_at=ACCEPTED, now=later
    )
    assert first is not None and second is not None
    assert (
        agreement(second, previous_finish=first.finish, previous_progress=None, progress=None)
        is None
    )


@given(
    elapsed=st.floats(min_value=1e-3, max_value=1e7),
    low=st.floats(min_value=1e-9, max_value=99.999),
    high=st.floats(min_value=1e-9, max_value=99.999),
)
def test_more_progress_never_means_a_later_finish(elapsed: float, low: float, high: float) -> None:
    low, high = sorted((low, high))
    accepted = NOW - timedelta(seconds=elapsed)
    slow = estimate_finish(progress=low, started_at=None, eta=None, accepted_at=accepted, now=NOW)
    fast = estimate_finish(progress=high, started_at=None, eta=None, accepted_at=accepted, now=NOW)
    if slow is None:  # a pace so slow it would end after year 9999
        return
    assert fast is not None
    assert NOW <= fast.finish <= slow.finish
