"""The sandbox's time-driven progress shapes (issue 38): what each reports along the way."""

from __future__ import annotations

import pytest

from jobwarden.demo.sandbox.behaviour import BehaviourError, parse_behaviour
from jobwarden.demo.sandbox.jobs import time_driven_progress


@pytest.mark.parametrize(
    ("shape", "fraction", "expected"),
    [
        ("steady", 0.0, 0.0),
        ("steady", 0.1234567, 12.3457),  # four decimals, as fine as a percentComplete
        ("steady", 0.5, 50.0),
        ("steady", 1.5, 99.9999),  # never 100 while the job runs
        ("stall90", 0.3, 45.0),
        ("stall90", 0.6, 90.0),
        ("stall90", 0.95, 90.0),  # stalled until the end
        ("front_loaded", 0.1, 30.0),
        ("front_loaded", 0.2, 60.0),
        ("front_loaded", 0.6, 80.0),  # the rest at a slower pace
        ("front_loaded", 0.99, 99.5),
    ],
)
def test_a_time_driven_job_reports_progress_in_its_shape(
    shape: str, fraction: float, expected: float
) -> None:
    assert time_driven_progress(shape, fraction) == pytest.approx(expected)


def test_a_progress_shape_needs_a_time_driven_job() -> None:
    assert parse_behaviour({"seconds_to_finish": 5, "progress_shape": "eta_slips"})
    with pytest.raises(BehaviourError, match="progress_shape needs seconds_to_finish"):
        parse_behaviour({"progress_shape": "stall90"})
    with pytest.raises(BehaviourError, match="progress_shape must be one of"):
        parse_behaviour({"seconds_to_finish": 5, "progress_shape": "sideways"})
