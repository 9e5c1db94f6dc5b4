"""The broker levels of a tenant's wake-ups (models/provider/wakeup_levels.py): the table,
and the bound the end-to-end fairness rests on, checked over random publish and start
sequences (a worker starts any waiting wake-up, in any order, as priorities allow)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.provider.wakeup_levels import LEVELS, level, most_waiting_at_or_below


@pytest.mark.parametrize(
    ("waiting", "weight", "priority", "expected"),
    [
        (1, 1, 0, 0),
        (2, 1, 0, 1),
        (3, 1, 0, 1),
        (4, 1, 0, 2),
        (7, 1, 0, 2),
        (8, 1, 0, 3),
        (300, 1, 0, 8),
        (511, 1, 0, 8),
        (512, 1, 0, 9),
        (50_000, 1, 0, 9),
        # A counter that lost track (zero or below) counts this one alone.
        (0, 1, 0, 0),
        (-3, 1, 0, 0),
        # Per unit of weight: a tenant weighing 3 has three wake-ups per level step.
        (3, 3, 0, 0),
        (4, 3, 0, 1),
        (12, 3, 0, 2),
        # Priority moves one level within the tenant's, never past the ends.
        (4, 1, 10, 1),
        (4, 1, -1, 3),
        (1, 1, 5, 0),
        (50_000, 1, -10, 9),
    ],
)
def test_a_tenants_nth_waiting_wake_up_goes_to_level_log2_n(
    waiting: int, weight: int, priority: int, expected: int
) -> None:
    assert level(waiting, weight=weight, priority=priority) == expected


def test_the_last_level_has_no_bound() -> None:
    with pytest.raises(ValueError, match="any number"):
        most_waiting_at_or_below(LEVELS - 1)


@given(
    weight=st.integers(min_value=1, max_value=4),
    # True: publish a wake-up of that priority; False: a worker starts the waiting one
    # at the given index (mod how many wait).
    moves=st.lists(
        st.tuples(st.booleans(), st.integers(min_value=-10, max_value=10), st.integers(0, 999)),
        max_size=300,
    ),
)
def test_a_tenant_never_has_more_waiting_at_or_below_a_level_than_the_bound(
    weight: int, moves: list[tuple[bool, int, int]]
) -> None:
    waiting: list[int] = []  # the levels of the tenant's waiting wake-ups
    for publish, priority, index in moves:
        if publish:
            # Counted at publish: this one and every one still waiting.
            waiting.append(level(len(waiting) + 1, weight=weight, priority=priority))
        elif waiting:
            waiting.pop(index % len(waiting))
        for at in range(LEVELS - 1):
            at_or_below = sum(1 for lv in waiting if lv <= at)
            assert at_or_below <= most_waiting_at_or_below(at, weight=weight)
