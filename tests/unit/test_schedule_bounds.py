"""Schedule bounds (docs/schedules.md, Bounds; issue 33, findings 5 and 6): parse_spec is
the one check the API and the file checker share, and for any declaration it either
refuses with a ScheduleError naming the field or returns a schedule whose slots can be
computed, jittered, planned and rendered without an overflow anywhere."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobwarden.models.schedules.slots import (
    FIELDS,
    LAST_YEAR,
    MAX_CATCHUP_SECONDS,
    MAX_INTERVAL_SECONDS,
    MAX_JITTER_SECONDS,
    ScheduleError,
    due_at,
    next_slot,
    parse_spec,
    plan_tick,
    render_command,
)

KEY_LIMIT = 255
LONG_CRON = f"{','.join(map(str, range(60)))} {','.join(map(str, range(24)))} * * *"
OFFSETS = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda m: timezone(timedelta(minutes=m))
)
EDGES = st.sampled_from(
    [
        *(0, 1, 59, 2**31 - 1, 2**31, 2**53, 2**63 - 1, 2**63, 2**64, 10**15, -1, -(2**31)),
        *(MAX_INTERVAL_SECONDS, MAX_INTERVAL_SECONDS + 1, MAX_JITTER_SECONDS + 1),
        MAX_CATCHUP_SECONDS + 1,
    ]
)
TIMES = st.one_of(
    st.datetimes(timezones=OFFSETS).map(lambda d: d.isoformat()),
    st.sampled_from(
        [
            *("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "1969-12-31T23:59:59Z"),
            *("9000-12-31T23:59:59Z", "1970-01-01T00:00:00+00:00", "2026-13-01T00:00:00Z"),
        ]
    ),
    st.text(max_size=30),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)
# A command nested beyond intake's bound of 32, or just within it.
DEEP = st.integers(min_value=30, max_value=200).map(lambda n: {"a": _nest(n)})


def _nest(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


VALUES: dict[str, st.SearchStrategy[Any]] = {
    "cron": st.sampled_from(["30 2 * * *", "* * * * *", "0 0 29 2 *", "61 * * * *", ""])
    | st.text(max_size=20),
    "interval_seconds": EDGES | st.integers() | st.floats() | st.text(max_size=5),
    "timezone": st.sampled_from(["UTC", "Europe/Berlin", "Pacific/Kiritimati", "../x", ""])
    | st.text(max_size=10),
    "start": TIMES | JSON,
    "end": TIMES | JSON,
    "jitter_seconds": EDGES | st.integers() | JSON,
    "provider": st.just("sandbox") | JSON,
    "command": st.dictionaries(st.text(max_size=5), JSON) | DEEP | JSON,
    "overlap": st.sampled_from(["skip", "allow_all", "nope"]) | JSON,
    "catchup_window_seconds": EDGES | st.integers() | JSON,
    "concurrency_key": st.text(max_size=5) | JSON,
    "priority": EDGES | st.integers(min_value=-12, max_value=12) | JSON,
}
# A valid declaration with hostile fields laid over it, so most examples reach the
# bounds instead of stopping at the first missing field.
BASES = st.sampled_from(
    [
        {"interval_seconds": 60, "provider": "sandbox", "command": {"at": "{slot}"}},
        {"cron": "30 2 * * *", "provider": "sandbox", "command": {}},
    ]
)
OVERLAYS = st.fixed_dictionaries({}, optional={name: VALUES[name] for name in sorted(FIELDS)})
TABLES = st.builds(lambda base, overlay: {**base, **overlay}, BASES, OVERLAYS)
NOW = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(LAST_YEAR, 12, 31), timezones=st.just(UTC)
)


@settings(max_examples=400, deadline=None)
@given(table=TABLES, now=NOW, name=st.sampled_from(["nightly", "a", "x" * 100, "Bad Name"]))
def test_any_declaration_is_refused_naming_a_field_or_runs_without_overflow(
    table: dict[str, Any], now: datetime, name: str
) -> None:
    try:
        spec = parse_spec("acme", name, table, key_limit=KEY_LIMIT)
    except ScheduleError as exc:
        assert exc.field and exc.problem and "\n" not in str(exc)
        return
    slot = next_slot(spec.timing, start=now)
    if slot is None:
        return
    assert slot.year <= LAST_YEAR + 1
    due_at(spec, slot)
    plan_tick(
        spec, next_slot_at=slot, now=now + timedelta(days=1), active=False, buffered=False, limit=3
    )
    render_command(spec.command, name=name, slot_at=slot, timezone=spec.timing.timezone)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("interval_seconds", MAX_INTERVAL_SECONDS + 1, f"must be at most {MAX_INTERVAL_SECONDS}"),
        ("interval_seconds", 0, "must be at least 1, got 0"),
        ("jitter_seconds", MAX_JITTER_SECONDS + 1, f"must be at most {MAX_JITTER_SECONDS}"),
        ("catchup_window_seconds", 2**63, f"must be at most {MAX_CATCHUP_SECONDS}"),
        ("start", "0001-01-01T00:00:00+14:00", "must lie within the years 1970..9000 in UTC"),
        ("end", "9999-12-31T23:59:59-14:00", "must lie within the years 1970..9000 in UTC"),
        ("command", _nest(40), "nested deeper than 32 levels (intake's bound)"),
        # Valid for cronsim, 237 characters: it used to fail only at sync, in Postgres.
        ("cron", LONG_CRON, "longer than 200 characters"),
        ("priority", 11, "must be from -10 to 10, got 11"),
        ("priority", "high", "must be a whole number, got str"),
    ],
)
def test_a_value_past_its_bound_is_refused_naming_its_field(
    field: str, value: Any, problem: str
) -> None:
    timing = {} if field == "cron" else {"interval_seconds": 60}
    table = {**timing, "provider": "sandbox", "command": {}, field: value}
    with pytest.raises(ScheduleError) as refused:
        parse_spec("acme", "nightly", table, key_limit=KEY_LIMIT)
    assert (refused.value.field, refused.value.problem) == (field, problem)


def test_the_bounds_themselves_are_accepted() -> None:
    table = {
        "interval_seconds": MAX_INTERVAL_SECONDS,
        "jitter_seconds": MAX_JITTER_SECONDS,
        "catchup_window_seconds": MAX_CATCHUP_SECONDS,
        "start": "1970-01-01T00:00:00Z",
        "end": f"{LAST_YEAR}-12-31T23:59:59Z",
        "provider": "sandbox",
        "command": {"a": _nest(31)},
    }
    spec = parse_spec("acme", "nightly", table, key_limit=KEY_LIMIT)
    assert spec.timing.interval_seconds == MAX_INTERVAL_SECONDS
