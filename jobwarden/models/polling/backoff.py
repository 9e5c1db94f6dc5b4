"""Delays: jittered exponential backoff, Retry-After and poll hints (estimates of a job's
finish are models/polling/estimates.py).

Pure functions. Randomness (``u``) and the current time (``now``) are passed in
by the caller, so every result is reproducible in a test. Nothing here reads
the clock or raises on provider input: bad provider values come back as a
``problem`` string for the caller to record.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from jobwarden.models.provider.pointers import Missing

_DELAY_SECONDS = re.compile(r"[0-9]+")
# Looks like a number but is not RFC 9110 delay-seconds (sign, fraction, exponent).
_NUMBER_LIKE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def backoff_delay(  # noqa: PLR0913 - keyword-only, each named at every call
    *, attempt: int, base: float, maximum: float, jitter_floor: float, u: float, growth: float
) -> float:
    """``min(maximum, base * growth**attempt)`` scaled by ``jitter_floor + (1 - jitter_floor) * u``.

    ``u`` in [0, 1] is the caller's random draw; ``u = 0`` gives the shortest
    delay, ``u = 1`` the full one. Huge attempts saturate at ``maximum``.
    Raises ValueError for a negative attempt, a non-positive base, a growth
    below 1, or ``jitter_floor``/``u`` outside [0, 1] (caller bugs, not provider input).
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    if not base > 0:
        raise ValueError(f"base must be > 0, got {base}")
    if not 1.0 <= growth < math.inf:
        raise ValueError(f"growth must be a finite number >= 1, got {growth}")
    if not 0.0 <= jitter_floor <= 1.0:
        raise ValueError(f"jitter_floor must be in [0, 1], got {jitter_floor}")
    if not 0.0 <= u <= 1.0:
        raise ValueError(f"u must be in [0, 1], got {u}")
    return backoff_ceiling(attempt=attempt, base=base, maximum=maximum, growth=growth) * (
        jitter_floor + (1.0 - jitter_floor) * u
    )


def backoff_ceiling(*, attempt: int, base: float, maximum: float, growth: float) -> float:
    """``min(maximum, base * growth**attempt)`` without jitter; huge attempts saturate."""
    try:
        raw = base * growth**attempt
    except OverflowError:
        # growth**attempt alone left the float range; with a tiny base the product may not.
        try:
            raw = math.exp(math.log(base) + attempt * math.log(growth))
        except OverflowError:
            raw = math.inf
    return min(maximum, raw)


def clamp(seconds: float, *, floor: float, cap: float) -> float:
    """``seconds`` limited to [floor, cap]; ValueError if floor > cap or seconds is NaN."""
    if floor > cap:
        raise ValueError(f"floor {floor} is above cap {cap}")
    if math.isnan(seconds):
        raise ValueError("cannot clamp NaN")
    return max(floor, min(cap, seconds))


def as_utc(moment: datetime) -> datetime:
    """``moment`` as an aware datetime; a naive value is taken to be UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryAfter:
    """A parsed Retry-After header: ``seconds`` from now, or a ``problem``.

    Both None means the header was absent. ``seconds`` may be huge (even
    infinite for thousands of digits); clamping is the caller's job.
    """

    seconds: float | None
    problem: str | None

    @property
    def valid(self) -> bool:
        return self.seconds is not None and self.problem is None


def parse_retry_after(value: str | None, now: datetime) -> RetryAfter:
    """Parse an RFC 9110 Retry-After value relative to ``now``.

    Accepts delay-seconds (``1*DIGIT`` only) and HTTP-date (IMF-fixdate,
    RFC 850, asctime; a naive date is UTC). A date in the past means 0 seconds.
    Never raises: anything else yields ``seconds=None`` and a ``problem`` of
    ``empty``, ``invalid_delay_seconds`` (e.g. "-5", "1.5") or ``unparsable``.
    """
    if value is None:
        return RetryAfter(seconds=None, problem=None)
    text = value.strip()
    if not text:
        return RetryAfter(seconds=None, problem="empty")
    if _DELAY_SECONDS.fullmatch(text):
        # float() has no digit limit (int() refuses > 4300 digits) and saturates at inf.
        return RetryAfter(seconds=float(text), problem=None)
    if _NUMBER_LIKE.fullmatch(text):
        return RetryAfter(seconds=None, problem="invalid_delay_seconds")
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return RetryAfter(seconds=None, problem="unparsable")
    delta = (as_utc(when) - as_utc(now)).total_seconds()
    return RetryAfter(seconds=max(0.0, delta), problem=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class PollHint:
    """A provider's "poll again in N seconds" from a status body, validated.

    Both None means the status body carried no hint.
    """

    seconds: float | None
    problem: str | None

    @property
    def valid(self) -> bool:
        return self.seconds is not None and self.problem is None


def _hint_number(raw: object) -> float | str:
    """The hint as a float, or a problem string."""
    if isinstance(raw, bool):
        return "not_a_number"
    if isinstance(raw, int):
        try:
            return float(raw)
        except OverflowError:
            return "non_finite"
    if isinstance(raw, float):
        return raw
    if isinstance(raw, str):
        text = raw.strip()
        if _NUMBER_LIKE.fullmatch(text):
            return float(text)
        if text.lower().lstrip("+-") in {"nan", "inf", "infinity"}:
            return "non_finite"
        return "not_a_number"
    return "not_a_number"


def validate_poll_hint(raw: object, *, now: datetime, deadline: datetime) -> PollHint:
    """Validate a raw poll hint (seconds) read from a status body.

    Accepts a non-negative finite int or float (not bool) or a numeric string.
    ``None`` or ``MISSING`` means no hint. Never raises; problems are
    ``not_a_number``, ``non_finite``, ``negative`` and ``beyond_deadline``
    (the hint would land after ``deadline``: obeying it means giving up).
    """
    if raw is None or isinstance(raw, Missing):
        return PollHint(seconds=None, problem=None)
    number = _hint_number(raw)
    if isinstance(number, str):
        return PollHint(seconds=None, problem=number)
    if not math.isfinite(number):
        return PollHint(seconds=None, problem="non_finite")
    if number < 0:
        return PollHint(seconds=None, problem="negative")
    remaining = (as_utc(deadline) - as_utc(now)).total_seconds()
    if number > remaining:
        return PollHint(seconds=None, problem="beyond_deadline")
    return PollHint(seconds=number, problem=None)
