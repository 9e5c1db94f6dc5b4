"""``wait_for_progress`` (jobwarden/demo/harness.py): a slow machine is waited for, a stuck
one is reported with where things stood. Counts come from a list, so no test here waits
on the clock for more than a few hundred milliseconds."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from jobwarden.demo.harness import wait_for_progress


def _counts(*values: int) -> Callable[[], tuple[int, str]]:
    seen: Iterator[int] = iter(values)
    last = 0

    def measure() -> tuple[int, str]:
        nonlocal last
        last = next(seen, last)
        return last, f"at {last}"

    return measure


def test_a_count_that_keeps_rising_is_waited_for_past_the_stall() -> None:
    # Ten rises, each within the stall: returns although the whole wait exceeds it.
    wait_for_progress(_counts(*range(11)), target=10, stall=0.05, timeout=5, what="ops")


def test_a_count_that_stops_rising_fails_naming_where_it_stood() -> None:
    with pytest.raises(TimeoutError) as raised:
        wait_for_progress(_counts(0, 3, 7), target=10, stall=0.1, timeout=5, what="ops")
    assert str(raised.value).startswith("ops: 7 of 10 after ")
    assert "(at 7)" in str(raised.value)


def test_the_total_bounds_even_a_count_that_keeps_rising() -> None:
    with pytest.raises(TimeoutError, match=r"ops: \d+ of 1000000 after "):
        wait_for_progress(
            _counts(*range(1_000_000)),
            target=1_000_000,
            stall=0.5,
            timeout=0.2,
            what="ops",
        )
