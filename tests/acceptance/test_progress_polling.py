"""Polls aimed at the finish two readings agree on, end to end (issue 38): real workers and
beat against the sandbox in its time-driven mode, which reports progress in a chosen
shape (steady, stalling at 90 %, or no progress but a slipping estimated_completion_time).

``LIVE_PROGRESS_SECONDS`` lengthens the jobs for the issue's live confirmation (60 s,
600 s); the suite runs them at a few seconds.
"""

from __future__ import annotations

import itertools
import os
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.acceptance.conftest import Pipeline

SECONDS_TO_FINISH = float(os.environ.get("LIVE_PROGRESS_SECONDS", "4"))
# The per-test timeout grows with a lengthened job (a 10 min one outlives the default).
pytestmark = [
    pytest.mark.usefixtures("stack"),
    pytest.mark.timeout(max(120.0, 3 * SECONDS_TO_FINISH + 120)),
]
# The target with steady progress: found at most 10 % of the duration late, with
# a handful of status requests (the sandbox answers the first one "queued").
LATE = 0.10 * SECONDS_TO_FINISH
SLACK = 0.25  # a worker's scheduling only ever makes a poll later
# The shortest backoff the stack's sandbox contract allows: jitter_floor 0.5 x base_seconds
# 0.1 (tests/acceptance/conftest.py); hint_floor_seconds only raises provider hints.
FLOOR = 0.05
ARRIVAL_STAMP_LAG = 0.025  # how much a loaded machine may shorten a gap between arrival stamps


def _submit(pipeline: Pipeline, **behaviour: Any) -> tuple[str, datetime]:
    op = pipeline.submit(
        {"seconds_to_finish": SECONDS_TO_FINISH, **behaviour},
        result_deadline_seconds=3 * SECONDS_TO_FINISH + 60,
    )
    row = pipeline.wait_state(op, timeout=3 * SECONDS_TO_FINISH + 60)
    assert row.state == "succeeded"
    (job,) = pipeline.remote_jobs(op)
    finish = datetime.fromisoformat(job["created_at"]) + timedelta(seconds=SECONDS_TO_FINISH)
    return op, finish


def _waits(pipeline: Pipeline, op: str) -> list[Any]:
    return [e.draft for e in pipeline.events(op) if "next_poll_at" in (e.draft.excerpt or {})]


def _status_times(pipeline: Pipeline, op: str) -> list[datetime]:
    return [datetime.fromisoformat(r["time"]) for r in pipeline.job_requests(op, "status")]


def test_a_job_with_steady_progress_is_asked_a_handful_of_times_and_found_at_its_finish(
    pipeline: Pipeline,
) -> None:
    op, finish = _submit(pipeline)
    aimed = [w for w in _waits(pipeline, op) if w.delay_source == "progress_estimate"]
    assert aimed, "no wait was aimed at the finish"
    # The history names the finish it aimed at, and the pace it saw.
    last = aimed[-1].excerpt
    assert abs((datetime.fromisoformat(last["estimated_finish"]) - finish).total_seconds()) <= LATE
    assert "%/s" in last["evidence"]

    seen = _status_times(pipeline, op)
    late = (seen[-1] - finish).total_seconds()
    # The live confirmation's numbers (pytest -s), beside the bench's virtual-clock row.
    print(f"\nsteady {SECONDS_TO_FINISH:g} s: {len(seen)} status requests, {late:.3f} s late")
    # Once two readings agree on the pace the worker aims at the finish: the aimed poll
    # finds it, or finds it just short and re-aims once. How many readings it takes to see
    # a pace is the machine's business (the sandbox's 0.2 s base makes the first ones
    # 0.1-0.2 s apart, and a worker scheduled late on a busy machine blurs the pace): on a
    # quiet one it is 4 in all ("queued", two readings, the finish), the figure printed.
    after_aim = [t for t in seen if t > aimed[0].at]
    assert 1 <= len(after_aim) <= 2, (aimed[0].at, after_aim, finish)
    # The poll before the last still saw the job running; the last came just after it.
    assert seen[-2] < finish <= seen[-1] + timedelta(seconds=0.05)
    assert late <= LATE + SLACK


def test_progress_that_stalls_at_90_percent_leaves_the_backoff_in_charge_without_a_burst(
    pipeline: Pipeline,
) -> None:
    op, finish = _submit(pipeline, progress_shape="stall90")
    sources = [w.delay_source for w in _waits(pipeline, op)]
    # Aimed at the finish the early pace implied, found it stalled: back to the backoff.
    assert "progress_estimate" in sources
    after = sources[sources.index("progress_estimate") :]
    assert "local_backoff" in after, sources
    # No burst was decided: every wait the worker chose holds the contract's floor.
    delays = [w.excerpt["delay_seconds"] for w in _waits(pipeline, op)]
    assert min(delays) >= FLOOR, delays
    # None left either, seen from the provider. The stamps are arrival times logged by a
    # sandbox sharing this process, which a loaded machine delays (0.084 s was once seen
    # where 0.1 s was expected); a burst's requests arrive within a few milliseconds.
    seen = _status_times(pipeline, op)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(seen)]
    assert min(gaps) >= FLOOR - ARRIVAL_STAMP_LAG, gaps
    # No later than the backoff's own bound: 25 % of the job's age, plus scheduling.
    assert (seen[-1] - finish).total_seconds() <= 0.25 * SECONDS_TO_FINISH + SLACK


def test_a_providers_eta_that_keeps_slipping_is_followed_without_being_late(
    pipeline: Pipeline,
) -> None:
    op, finish = _submit(pipeline, progress_shape="eta_slips")
    waits = _waits(pipeline, op)
    assert any(w.delay_source == "provider_eta" for w in waits), [w.delay_source for w in waits]
    eta = next(w for w in waits if w.delay_source == "provider_eta")
    assert eta.excerpt["evidence"].startswith("provider ETA")
    seen = _status_times(pipeline, op)
    assert (seen[-1] - finish).total_seconds() <= LATE + SLACK
