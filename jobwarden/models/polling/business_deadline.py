"""The business deadline: when the business stops wanting the work, whatever the provider.

Separate from the provider job's own deadlines (``create_deadline``,
``result_deadline``, set from the contract): a deploy window closes, a report is
useless after 9:00. A submission names it as an absolute time or as seconds from
now; once stored (``operations.business_deadline``) it is a fact like any other.

What it bounds, and why:

- the create: no create leaves after it (the operation fails, nothing was sent);
- reconciliation: no same-token create or lookup leaves after it (an ambiguous
  create escalates ``deadline_exceeded``, as when its create deadline passes);
- observing: every wait is clipped to the earlier of it and the result deadline,
  and when it passes automation stops with ``deadline_exceeded`` (the operation
  keeps everything needed to look again; the options are to cancel at the
  provider or abandon, never to extend past it);
- not a cancel's confirmation, nor a finished job's result collection: those are
  what the business may still want after its deadline (stop the job; keep what
  was paid for), and each has its own deadline.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from jobwarden.models.contracts.fields import MAX_SECONDS
from jobwarden.models.errors import InvalidSubmissionError

__all__ = ["check_business_deadline", "earlier", "passed", "resolve"]


def check_business_deadline(value: object) -> datetime | float | None:
    """An absolute time (a timezone-aware datetime or an ISO 8601 string with its UTC
    offset) or a number of seconds from now (above 0, at most 30 days); None for none.

    A time already past is accepted: a repeat of a submission after its deadline must
    still be answered as a replay, and a new one simply ends without a create.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidSubmissionError("business_deadline must be a time or a number of seconds")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidSubmissionError("business_deadline must be finite")
        if value <= 0:
            raise InvalidSubmissionError("business_deadline in seconds must be positive")
        if value > MAX_SECONDS:
            raise InvalidSubmissionError(
                f"business_deadline must be at most {MAX_SECONDS} seconds (30 days) from now"
            )
        return float(value)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidSubmissionError(
                "business_deadline must be an ISO 8601 time (e.g. 2026-12-01T09:00:00Z) "
                "or a number of seconds"
            ) from None
    if not isinstance(value, datetime):
        raise InvalidSubmissionError(
            f"business_deadline must be a time or a number of seconds, got {type(value).__name__}"
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidSubmissionError("business_deadline must name its UTC offset (e.g. Z)")
    try:
        value.astimezone(UTC)  # what resolve() stores; years 1 and 9999 may not convert
    except OverflowError:
        raise InvalidSubmissionError("business_deadline is out of range") from None
    return value


def resolve(checked: datetime | float | None, now: datetime) -> datetime | None:
    """The stored time (in UTC) for a checked value: seconds count from ``now``."""
    if checked is None:
        return None
    if isinstance(checked, datetime):
        return checked.astimezone(UTC)
    return now + timedelta(seconds=checked)


def earlier(deadline: datetime, business: datetime | None) -> datetime:
    """``deadline``, or the business deadline when that comes first."""
    return deadline if business is None or deadline <= business else business


def passed(business: datetime | None, now: datetime) -> bool:
    return business is not None and now >= business
