"""When will the remote job finish? Progress and a provider's ETA as evidence for a wait.

Pure functions of one status reading, the estimate the previous reading left on the row
and the time ``now``; nothing here reads the clock or raises on provider input.

A reading gives an estimated finish in one of two ways:

- the provider's own ETA (``status.eta_pointer``, e.g. ``estimated_completion_time``),
  when it lies in our future;
- progress ``p`` strictly between 0 and 100 (a percentage, or item counts): a job that
  ran ``elapsed`` seconds since its start to reach ``p`` % ends, at that pace,
  ``elapsed * (100 - p) / p`` seconds from now.

One reading is a guess; two that agree are evidence. The next poll is aimed at the
finish only when the previous reading's estimate lies within ``PACE_TOLERANCE`` of the
whole estimated duration from this one and, for progress, it moved forward by enough of
its steps to measure a pace and the pace between the two readings implies the same
finish. ``agreement`` says why not otherwise (first reading, stalled, jumped back, moved
too little, the pace or the ETA moved), and the caller falls back to its backoff for
that attempt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

__all__ = [
    "FINISH_MARGIN",
    "PACE_TOLERANCE",
    "Disagreement",
    "FinishEstimate",
    "agreement",
    "aim",
    "estimate_finish",
    "progress_step",
    "recent_finish",
]

# Two estimates agree when they differ by at most this share of the estimated duration.
# It is the lateness the issue allows with steady progress (10 % of the duration): if two
# readings disagree by more, aiming at either could find the job later than that, so the
# backoff (which finds it within (growth_factor - 1) x its age) keeps charge.
PACE_TOLERANCE = 0.10
# How far past the estimated finish a poll aims, as a share of the estimated duration: a
# job slightly slower than its own average is found by this poll, not by the next one,
# and a poll that comes too early still leaves the next one this far away (no burst).
FINISH_MARGIN = 0.03


class Disagreement(StrEnum):
    first_reading = "first_reading"  # no estimate from the previous reading to compare
    stalled = "stalled"  # progress did not move since the previous reading
    jumped_back = "jumped_back"  # progress went down (a restart, another counter)
    pace_changed = "pace_changed"  # the progress implies a finish the last one did not
    eta_moved = "eta_moved"  # the provider moved its own ETA
    unresolved = "unresolved"  # progress moved by too few of its steps to measure a pace


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishEstimate:
    """What one reading says about the finish, on our clock (an ETA on the provider's)."""

    finish: datetime
    start: datetime  # what the job's duration is counted from
    from_eta: bool  # the provider's ETA, not extrapolated progress
    pace: float | None  # percent per second, for progress

    @property
    def duration(self) -> float:
        return max(0.0, (self.finish - self.start).total_seconds())

    def evidence(self) -> str:
        """For the history: which rule and on what evidence."""
        if self.from_eta:
            return f"provider ETA {self.finish.isoformat()}"
        return f"pace {self.pace:.4g} %/s since {self.start.isoformat()}"


def estimate_finish(
    *,
    progress: float | None,
    started_at: datetime | None,
    eta: datetime | None,
    accepted_at: datetime,
    now: datetime,
) -> FinishEstimate | None:
    """The finish one reading implies, or None when it implies none.

    The provider's ETA wins when it lies after ``now``: an ETA already past says only
    that the job is late (or that the provider's clock is behind ours), nothing about
    when it ends. Progress counts from the provider's start unless that start lies in
    our future or before our acceptance (clock skew: we never trust a start outside the
    span we saw), else from our acceptance. Progress 0 (not started), 100 (done working
    but not finished: OpenAI's ``finalizing``) and anything outside (0, 100) say nothing.
    """
    if eta is not None and eta > now:
        return FinishEstimate(finish=eta, start=accepted_at, from_eta=True, pace=None)
    if progress is None or not 0.0 < progress < 100.0:
        return None
    start = accepted_at
    if started_at is not None and started_at <= now:
        start = max(start, started_at)
    elapsed = (now - start).total_seconds()
    if not 0.0 < elapsed < math.inf:
        return None
    remaining = elapsed * (100.0 - progress) / progress
    try:
        finish = now + timedelta(seconds=remaining)
    except OverflowError:
        return None  # a pace so slow it ends after year 9999 says nothing useful
    return FinishEstimate(finish=finish, start=start, from_eta=False, pace=progress / elapsed)


def progress_step(value: float) -> float:
    """The finest step ``value`` is reported in: 1 for whole percents, 0.01 for 12.34, ...

    A provider's resolution is not announced; the decimals of what it sends are the best
    evidence of it (a float's binary noise aside: six decimals at most).
    """
    for places in range(7):
        scaled = value * 10**places
        if abs(scaled - round(scaled)) < 1e-6 * max(1.0, abs(scaled)):
            return 10.0**-places
    return 1e-6


def agreement(
    current: FinishEstimate,
    *,
    previous_finish: datetime | None,
    previous_progress: float | None,
    progress: float | None,
    step: float | None = None,
) -> Disagreement | None:
    """None when this reading confirms the previous one's finish, else why it does not.

    Progress that did not move or went back breaks the pace whatever the estimates say:
    a stall at 90 % still extrapolates to a finish near the last one for a while. For
    progress, the pace since the previous reading must also imply the same finish as the
    pace since the start: two readings close together agree on the average pace of a job
    that is speeding up, yet that average promises a finish far too late. That pace is
    known only to within one ``step`` of the progress (item counts: one item; else
    ``progress_step``), so progress must have moved by ``step / PACE_TOLERANCE`` for it
    to be measured within the tolerance.
    """
    if progress is not None and previous_progress is not None:
        if progress < previous_progress:
            return Disagreement.jumped_back
        if progress == previous_progress and not current.from_eta:
            return Disagreement.stalled
    if previous_finish is None:
        return Disagreement.first_reading
    allowed = PACE_TOLERANCE * current.duration
    moved = abs((current.finish - previous_finish).total_seconds())
    if moved > allowed:
        return Disagreement.eta_moved if current.from_eta else Disagreement.pace_changed
    if current.from_eta or progress is None:
        return None
    if previous_progress is not None:
        if step is None:
            step = min(progress_step(progress), progress_step(previous_progress))
        if progress - previous_progress < step / PACE_TOLERANCE:
            return Disagreement.unresolved
    recent = recent_finish(current, previous_finish, previous_progress, progress)
    if recent is None:
        return Disagreement.first_reading
    if abs((recent - current.finish).total_seconds()) > allowed:
        return Disagreement.pace_changed
    return None


def recent_finish(
    current: FinishEstimate,
    previous_finish: datetime,
    previous_progress: float | None,
    progress: float,
) -> datetime | None:
    """The finish the pace between the previous reading and this one implies, or None.

    The previous reading's time is not stored: its finish and progress give it, as
    ``start + (finish - start) * progress / 100`` (its own extrapolation run backwards,
    from the same start). None when that reading cannot have been a progress reading
    between the start and this one.
    """
    if previous_progress is None or not 0.0 < previous_progress < progress < 100.0:
        return None
    span = (previous_finish - current.start).total_seconds() * previous_progress / 100.0
    now = current.finish - timedelta(seconds=current.duration * (100.0 - progress) / 100.0)
    since = (now - current.start).total_seconds() - span
    if not span > 0.0 or not 0.0 < since < math.inf:
        return None
    pace = (progress - previous_progress) / since
    try:
        return now + timedelta(seconds=(100.0 - progress) / pace)
    except OverflowError:
        return None


def aim(
    current: FinishEstimate, *, recent: datetime | None = None, expires_at: datetime | None = None
) -> datetime:
    """Just past the estimated finish (the earlier of the average pace's and the recent
    pace's, ``recent``: a job still speeding up within the tolerance ends nearer the
    latter); never after an expiry the provider announced.

    A job cannot run past its ``expires_at`` (OpenAI Batch: it is then ``expired``), so
    by then there is an outcome to read whatever the estimate says.
    """
    finish = current.finish if recent is None else min(current.finish, recent)
    try:
        target = finish + timedelta(seconds=FINISH_MARGIN * current.duration)
    except OverflowError:
        target = finish
    if expires_at is not None and current.start < expires_at < target:
        return expires_at
    return target
