"""Backoff, Retry-After and poll-hint parsing: tables plus properties."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.polling.backoff import (
    PollHint,
    RetryAfter,
    backoff_ceiling,
    backoff_delay,
    clamp,
    parse_retry_after,
    validate_poll_hint,
)
from jobwarden.models.provider.pointers import MISSING

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
DEADLINE = NOW + timedelta(hours=1)

attempts = st.integers(min_value=0, max_value=5000)
bases = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False)
growths = st.floats(min_value=1.0, max_value=4.0)
unit = st.floats(min_value=0.0, max_value=1.0)


def _ceiling(attempt: int, base: float, maximum: float, growth: float) -> float:
    # In logarithms, so no power overflows however large the attempt.
    log_raw = math.log(base) + attempt * math.log(growth)
    return maximum if log_raw >= math.log(maximum) else math.exp(log_raw)


@given(
    attempt=attempts, base=bases, extra=st.floats(0, 1e6), growth=growths, jitter_floor=unit, u=unit
)
def test_backoff_delay_stays_between_the_jitter_floor_and_the_ceiling(
    attempt: int, base: float, extra: float, growth: float, jitter_floor: float, u: float
) -> None:
    maximum = base + extra
    ceiling = _ceiling(attempt, base, maximum, growth)
    delay = backoff_delay(
        attempt=attempt, base=base, maximum=maximum, jitter_floor=jitter_floor, u=u, growth=growth
    )
    assert jitter_floor * ceiling * (1 - 1e-9) <= delay <= ceiling * (1 + 1e-9)


@given(attempt=attempts, base=bases, growth=growths, jitter_floor=unit, u1=unit, u2=unit)
def test_backoff_delay_grows_with_the_random_draw(
    attempt: int, base: float, growth: float, jitter_floor: float, u1: float, u2: float
) -> None:
    low, high = sorted((u1, u2))

    def delay(u: float) -> float:
        return backoff_delay(
            attempt=attempt,
            base=base,
            maximum=base * 100,
            jitter_floor=jitter_floor,
            u=u,
            growth=growth,
        )

    assert delay(low) <= delay(high)


@given(attempt=st.integers(0, 10**6), base=bases, growth=growths)
def test_the_backoff_ceiling_never_shrinks_from_one_attempt_to_the_next(
    attempt: int, base: float, growth: float
) -> None:
    def ceiling(n: int) -> float:
        return backoff_ceiling(attempt=n, base=base, maximum=base * 1000, growth=growth)

    assert ceiling(attempt) <= ceiling(attempt + 1) <= base * 1000


@pytest.mark.parametrize(
    ("growth", "attempt", "u", "expected"),
    [
        (2.0, 0, 1.0, 2.0),
        (2.0, 1, 1.0, 4.0),
        (2.0, 3, 1.0, 16.0),
        (1.25, 1, 1.0, 2.5),
        (1.25, 3, 1.0, 3.90625),
        (1.5, 2, 1.0, 4.5),
        (1.25, 30, 1.0, 60.0),  # capped at maximum
        (1.25, 3, 0.0, 1.953125),  # jitter floor 0.5 halves it
        (1.25, 10**9, 1.0, 60.0),  # a huge attempt saturates instead of overflowing
        (1.0, 10**9, 1.0, 2.0),  # growth 1: a constant interval
    ],
)
def test_backoff_delay_grows_by_the_growth_factor_per_attempt_up_to_the_maximum(
    growth: float, attempt: int, u: float, expected: float
) -> None:
    delay = backoff_delay(
        attempt=attempt, base=2.0, maximum=60.0, jitter_floor=0.5, u=u, growth=growth
    )
    assert delay == pytest.approx(expected)


def test_a_tiny_base_still_grows_exactly_past_the_float_range_of_the_power() -> None:
    # 2**1100 alone overflows a float; 2**-1074 * 2**1100 = 2**26 does not.
    ceiling = backoff_ceiling(attempt=1100, base=2.0**-1074, maximum=1e30, growth=2.0)
    assert ceiling == pytest.approx(2.0**26)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attempt": -1},
        {"base": 0.0},
        {"jitter_floor": 1.5},
        {"u": -0.1},
        {"u": 1.1},
        {"growth": 0.9},
        {"growth": math.inf},
        {"growth": math.nan},
    ],
)
def test_backoff_delay_refuses_arguments_outside_its_contract(kwargs: dict[str, float]) -> None:
    args: dict[str, float] = {"attempt": 0, "base": 1.0, "maximum": 10.0, "jitter_floor": 0.5}
    args |= {"u": 0.5, "growth": 1.25}
    args.update(kwargs)
    with pytest.raises(ValueError, match="must be"):
        backoff_delay(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, RetryAfter(seconds=None, problem=None)),
        ("120", RetryAfter(seconds=120.0, problem=None)),
        (" 120 ", RetryAfter(seconds=120.0, problem=None)),
        ("0", RetryAfter(seconds=0.0, problem=None)),
        ("-5", RetryAfter(seconds=None, problem="invalid_delay_seconds")),
        ("1.5", RetryAfter(seconds=None, problem="invalid_delay_seconds")),
        ("+5", RetryAfter(seconds=None, problem="invalid_delay_seconds")),
        ("", RetryAfter(seconds=None, problem="empty")),
        ("soon", RetryAfter(seconds=None, problem="unparsable")),
        ("Wed, 99 Foo 2024 12:00:00 GMT", RetryAfter(seconds=None, problem="unparsable")),
        ("Wed, 01 May 2024 25:00:00 GMT", RetryAfter(seconds=None, problem="unparsable")),
        ("Wed, 01 May 2024 12:02:00 GMT", RetryAfter(seconds=120.0, problem=None)),  # IMF-fixdate
        ("Wed, 01 May 2024 11:00:00 GMT", RetryAfter(seconds=0.0, problem=None)),  # past
        ("Wednesday, 01-May-24 12:00:30 GMT", RetryAfter(seconds=30.0, problem=None)),  # RFC 850
        ("Wed May  1 12:01:00 2024", RetryAfter(seconds=60.0, problem=None)),  # asctime, naive=UTC
    ],
)
def test_retry_after_follows_rfc_9110(value: str | None, expected: RetryAfter) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_retry_after_http_date_in_the_past_means_now() -> None:
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", NOW).seconds == 0.0


@pytest.mark.parametrize("digits", [31, 400, 5000])
def test_retry_after_with_absurdly_many_digits_is_a_huge_float_not_a_crash(digits: int) -> None:
    parsed = parse_retry_after("9" * digits, NOW)
    assert parsed.problem is None
    assert parsed.seconds is not None
    assert parsed.seconds >= 1e30


@given(st.text(max_size=40))
def test_retry_after_never_raises_and_gives_seconds_or_a_problem(value: str) -> None:
    parsed = parse_retry_after(value, NOW)
    assert (parsed.seconds is None) != (parsed.problem is None)
    assert parsed.seconds is None or parsed.seconds >= 0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, PollHint(seconds=None, problem=None)),
        (MISSING, PollHint(seconds=None, problem=None)),
        (30, PollHint(seconds=30.0, problem=None)),
        (0, PollHint(seconds=0.0, problem=None)),
        (2.5, PollHint(seconds=2.5, problem=None)),
        ("45", PollHint(seconds=45.0, problem=None)),
        (" 1.5 ", PollHint(seconds=1.5, problem=None)),
        (-1, PollHint(seconds=None, problem="negative")),
        ("-3", PollHint(seconds=None, problem="negative")),
        ("abc", PollHint(seconds=None, problem="not_a_number")),
        ("", PollHint(seconds=None, problem="not_a_number")),
        (True, PollHint(seconds=None, problem="not_a_number")),
        ([30], PollHint(seconds=None, problem="not_a_number")),
        (math.nan, PollHint(seconds=None, problem="non_finite")),
        (math.inf, PollHint(seconds=None, problem="non_finite")),
        ("NaN", PollHint(seconds=None, problem="non_finite")),
        ("-Infinity", PollHint(seconds=None, problem="non_finite")),
        (10**400, PollHint(seconds=None, problem="non_finite")),
        (3601, PollHint(seconds=None, problem="beyond_deadline")),
        (3600, PollHint(seconds=3600.0, problem=None)),  # exactly at the deadline is fine
    ],
)
def test_poll_hints_are_validated_before_use(raw: object, expected: PollHint) -> None:
    assert validate_poll_hint(raw, now=NOW, deadline=DEADLINE) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(0.5, 1.0), (5.0, 5.0), (500.0, 60.0), (math.inf, 60.0)],
)
def test_clamp_keeps_seconds_between_floor_and_cap(seconds: float, expected: float) -> None:
    assert clamp(seconds, floor=1.0, cap=60.0) == expected


def test_clamp_refuses_a_floor_above_the_cap_and_nan() -> None:
    with pytest.raises(ValueError, match="above cap"):
        clamp(5.0, floor=10.0, cap=1.0)
    with pytest.raises(ValueError, match="NaN"):
        clamp(math.nan, floor=0.0, cap=1.0)
