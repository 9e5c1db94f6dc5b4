"""The schedules core (models/schedules/slots.py): which slots are due and what each becomes,
on an injected clock: every ``now`` below is an argument, nothing reads the time."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobwarden.models.schedules.files import check_schedules
from jobwarden.models.schedules.slots import (
    OverlapPolicy,
    ScheduleError,
    ScheduleSpec,
    SlotState,
    Timing,
    backfill_slots,
    jitter,
    overlap_decision,
    parse_spec,
    plan_tick,
    render_command,
    slot_key,
    slots,
)

BERLIN = "Europe/Berlin"
T0 = datetime(2026, 6, 1, tzinfo=UTC)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, sec: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, sec, tzinfo=UTC)


def spec(timing: Timing, **fields: Any) -> ScheduleSpec:
    base: dict[str, Any] = {
        "tenant": "t",
        "name": "nightly",
        "timing": timing,
        "provider": "sandbox",
        "command": {"kind": "export"},
    }
    return ScheduleSpec(**(base | fields))


def day(timing: Timing, start: datetime, hours: int = 24) -> list[datetime]:
    out: list[datetime] = []
    for slot in slots(timing, start=start):
        if slot >= start + timedelta(hours=hours):
            return out
        out.append(slot)
    return out


# --- DST in Europe/Berlin: spring forward 2026-03-29 02:00 CET -> 03:00 CEST; autumn back
# 2026-10-25 03:00 CEST -> 02:00 CET.


def test_a_0230_slot_on_the_spring_forward_day_fires_once_right_after_the_gap() -> None:
    timing = Timing(cron="30 2 * * *", timezone=BERLIN)
    # Local midnight is 23:00 UTC the day before.
    assert day(timing, utc(2026, 3, 28, 23)) == [utc(2026, 3, 29, 1)]  # 03:00 CEST


def test_a_0230_slot_on_the_autumn_day_fires_once_on_its_first_occurrence() -> None:
    timing = Timing(cron="30 2 * * *", timezone=BERLIN)
    assert day(timing, utc(2026, 10, 24, 22), hours=25) == [utc(2026, 10, 25, 0, 30)]


def test_an_hourly_schedule_fires_once_per_real_hour_across_both_transitions() -> None:
    timing = Timing(cron="0 * * * *", timezone=BERLIN)
    spring = day(timing, utc(2026, 3, 28, 23), hours=23)  # the local day is 23 hours long
    autumn = day(timing, utc(2026, 10, 24, 22), hours=25)  # and this one 25
    assert len(spring) == 23 and len(autumn) == 25
    for found in (spring, autumn):
        assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(found))


def test_two_local_times_folding_onto_one_instant_name_it_once() -> None:
    # 02:00 and 02:30 do not exist on the spring day: both land on 03:00, one slot.
    timing = Timing(cron="0,30 2,3 * * *", timezone=BERLIN)
    found = day(timing, utc(2026, 3, 28, 23))
    assert found == sorted(set(found))
    assert found[0] == utc(2026, 3, 29, 1)


def test_a_tick_across_the_spring_gap_decides_the_slot_once() -> None:
    s = spec(Timing(cron="30 2 * * *", timezone=BERLIN), catchup_window_seconds=3600)
    before = plan_tick(
        s, next_slot_at=utc(2026, 3, 28, 23), now=utc(2026, 3, 29, 0, 59), active=False,
        buffered=False, limit=10,
    )  # fmt: skip
    assert before.decisions == () and before.next_slot_at == utc(2026, 3, 29, 1)
    after = plan_tick(
        s, next_slot_at=before.next_slot_at, now=utc(2026, 3, 29, 1, 0, 5), active=False,
        buffered=False, limit=10,
    )  # fmt: skip
    assert [(d.slot_at, d.state) for d in after.decisions] == [
        (utc(2026, 3, 29, 1), SlotState.submitting)
    ]
    assert after.next_slot_at == utc(2026, 3, 30, 0, 30)


# --- catch-up window


def test_three_hours_down_with_a_one_hour_window_fires_the_last_hour_and_misses_the_rest() -> None:
    start = utc(2026, 6, 1, 9)
    s = spec(
        Timing(interval_seconds=600, start_at=start),
        catchup_window_seconds=3600,
        overlap=OverlapPolicy.allow_all,
    )
    now = start + timedelta(hours=3)
    plan = plan_tick(s, next_slot_at=start, now=now, active=False, buffered=False, limit=1000)
    states = [(d.slot_at, d.state) for d in plan.decisions]
    assert len(states) == 19  # 09:00 … 12:00 inclusive
    missed = [at for at, state in states if state is SlotState.missed]
    fired = [at for at, state in states if state is SlotState.submitting]
    # 11:00 is exactly one window late: still inside it.
    assert fired == [start + timedelta(minutes=m) for m in range(120, 190, 10)]
    assert missed == [start + timedelta(minutes=m) for m in range(0, 120, 10)]
    assert all("catch-up window of 3600 s" in (d.reason or "") for d in plan.decisions[:12])
    assert plan.next_slot_at == start + timedelta(hours=3, minutes=10)


def test_the_limit_leaves_the_remaining_due_slots_to_the_next_tick() -> None:
    s = spec(Timing(interval_seconds=60, start_at=T0), overlap=OverlapPolicy.allow_all)
    plan = plan_tick(
        s, next_slot_at=T0, now=T0 + timedelta(minutes=9), active=False, buffered=False, limit=4
    )
    assert len(plan.decisions) == 4 and plan.next_slot_at == T0 + timedelta(minutes=4)
    assert plan.next_due_at == plan.next_slot_at


def test_a_schedule_past_its_end_has_no_next_slot() -> None:
    s = spec(Timing(interval_seconds=60, start_at=T0, end_at=T0 + timedelta(minutes=2)))
    plan = plan_tick(
        s, next_slot_at=T0, now=T0 + timedelta(hours=1), active=False, buffered=False, limit=10
    )
    assert len(plan.decisions) == 3 and plan.next_slot_at is None and plan.next_due_at is None


# --- overlap policies


@pytest.mark.parametrize(
    ("policy", "active", "buffered", "state", "cancel"),
    [
        (OverlapPolicy.skip, False, False, SlotState.submitting, False),
        (OverlapPolicy.skip, True, False, SlotState.skipped, False),
        (OverlapPolicy.buffer_one, True, False, SlotState.buffered, False),
        (OverlapPolicy.buffer_one, True, True, SlotState.skipped, False),
        (OverlapPolicy.buffer_one, False, True, SlotState.submitting, False),
        (OverlapPolicy.allow_all, True, True, SlotState.submitting, False),
        (OverlapPolicy.cancel_previous, True, False, SlotState.submitting, True),
        (OverlapPolicy.cancel_previous, False, False, SlotState.submitting, False),
    ],
)
def test_overlap_policy_table(
    policy: OverlapPolicy, active: bool, buffered: bool, state: SlotState, cancel: bool
) -> None:
    d = overlap_decision(policy, T0, active=active, buffered=buffered)
    assert (d.state, d.cancel_previous) == (state, cancel)
    assert (d.reason is None) == (state is SlotState.submitting)


def test_within_one_tick_a_fired_slot_counts_as_active_for_the_next() -> None:
    timing = Timing(interval_seconds=60, start_at=T0)
    now = T0 + timedelta(minutes=2)
    wanted = {
        OverlapPolicy.skip: ["submitting", "skipped", "skipped"],
        OverlapPolicy.buffer_one: ["submitting", "buffered", "skipped"],
        OverlapPolicy.allow_all: ["submitting"] * 3,
        OverlapPolicy.cancel_previous: ["submitting"] * 3,
    }
    for policy, states in wanted.items():
        plan = plan_tick(
            spec(timing, overlap=policy), next_slot_at=T0, now=now, active=False, buffered=False,
            limit=10,
        )  # fmt: skip
        assert [d.state.value for d in plan.decisions] == states, policy


# --- properties


CRONS = ["*/7 * * * *", "30 2 * * *", "0 * * * *", "15 1-3 * * 0"]
# Lord Howe moves its clocks by half an hour.
ZONES = [BERLIN, "UTC", "America/New_York", "Australia/Lord_Howe"]


@st.composite
def timings(draw: st.DrawFn) -> Timing:
    if draw(st.booleans()):
        return Timing(
            cron=draw(st.sampled_from(CRONS)),
            timezone=draw(st.sampled_from(ZONES)),
        )
    return Timing(
        interval_seconds=draw(st.integers(60, 7200)),
        start_at=T0 + timedelta(seconds=draw(st.integers(-(10**6), 10**6))),
    )


moments = st.integers(0, 400 * 86400).map(lambda s: utc(2026, 1, 1) + timedelta(seconds=s))


@settings(max_examples=150, deadline=None)
@given(timings(), moments, st.integers(1, 50))
def test_slots_are_strictly_increasing_whole_seconds_and_start_inclusive(
    timing: Timing, start: datetime, n: int
) -> None:
    found = []
    for slot in slots(timing, start=start):
        found.append(slot)
        if len(found) == n:
            break
    assert all(a < b for a, b in itertools.pairwise(found))
    assert all(s >= start and s.microsecond == 0 and s.tzinfo is UTC for s in found)
    # Starting exactly at a slot names it first: a tick resumed at its timer decides it.
    assert next(iter(slots(timing, start=found[0]))) == found[0]


@settings(max_examples=150, deadline=None)
@given(
    timings(),
    moments,
    st.integers(0, 3 * 86400),
    st.integers(0, 3 * 86400),
    st.sampled_from(list(OverlapPolicy)),
    st.integers(0, 7200),
)
def test_deciding_in_two_ticks_names_every_slot_exactly_once(
    timing: Timing,
    start: datetime,
    first: int,
    second: int,
    policy: OverlapPolicy,
    window: int,
) -> None:
    """A restart between ticks, or one tick cut short, neither doubles nor drops a slot."""
    s = spec(timing, overlap=policy, catchup_window_seconds=window)
    nxt = next(iter(slots(timing, start=start)))
    now1 = start + timedelta(seconds=first)
    now2 = now1 + timedelta(seconds=second)
    a = plan_tick(s, next_slot_at=nxt, now=now1, active=False, buffered=False, limit=10_000)
    rest = a.next_slot_at
    b = (
        plan_tick(s, next_slot_at=rest, now=now2, active=False, buffered=False, limit=10_000)
        if rest
        else None
    )
    once = plan_tick(s, next_slot_at=nxt, now=now2, active=False, buffered=False, limit=10_000)
    split = [d.slot_at for d in a.decisions] + ([d.slot_at for d in b.decisions] if b else [])
    assert split == [d.slot_at for d in once.decisions]
    assert len(set(split)) == len(split)
    assert all(d.slot_at <= now2 for d in once.decisions)


@given(st.integers(0, 3600), moments)
def test_jitter_is_fixed_per_slot_and_bounded(bound: int, at: datetime) -> None:
    first = jitter("nightly", at, bound)
    assert first == jitter("nightly", at, bound)
    assert timedelta(0) <= first <= timedelta(seconds=bound)


def test_jitter_delays_when_a_slot_is_due_but_not_its_key() -> None:
    s = spec(Timing(interval_seconds=3600, start_at=T0, jitter_seconds=1800))
    delay = jitter("nightly", T0, 1800)
    assert delay > timedelta(0)  # fixed by the name and slot: this pair draws a delay
    early = plan_tick(s, next_slot_at=T0, now=T0, active=False, buffered=False, limit=5)
    assert early.decisions == () and early.next_due_at == T0 + delay
    late = plan_tick(s, next_slot_at=T0, now=T0 + delay, active=False, buffered=False, limit=5)
    assert [d.slot_at for d in late.decisions] == [T0]
    assert slot_key("nightly", T0) == "schedule:nightly:2026-06-01T00:00:00Z"


# --- templates, backfill ranges, declarations


def test_the_command_template_names_the_slot() -> None:
    at = utc(2026, 3, 29, 1)
    command = render_command(
        {"day": "{slot_date}", "at": ["{slot}", "{slot_local}"], "n": 3, "raw": "{other}"},
        name="nightly",
        slot_at=at,
        timezone=BERLIN,
    )
    assert command == {
        "day": "2026-03-29",
        "at": ["2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00"],
        "n": 3,
        "raw": "{other}",
    }


def test_backfill_ranges_are_inclusive_past_and_bounded() -> None:
    timing = Timing(interval_seconds=3600, start_at=T0)
    now = T0 + timedelta(days=2)
    assert backfill_slots(timing, start=T0, end=T0 + timedelta(hours=3), now=now) == [
        T0 + timedelta(hours=h) for h in range(4)
    ]
    with pytest.raises(ScheduleError, match=r"^to: is in the future"):
        backfill_slots(timing, start=T0, end=now + timedelta(seconds=1), now=now)
    with pytest.raises(ScheduleError, match=r"^to: is before --from"):
        backfill_slots(timing, start=now, end=T0, now=now)
    every_second = Timing(interval_seconds=1, start_at=T0)
    with pytest.raises(ScheduleError, match="more than 10000 slots"):
        backfill_slots(every_second, start=T0, end=T0 + timedelta(hours=3), now=now)


GOOD = {"cron": "30 2 * * *", "provider": "sandbox", "command": {"kind": "export"}}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"timezone": "Europe/Berln"}, "timezone"),
        ({"cron": "61 2 * * *"}, "cron"),
        ({"interval_seconds": 60}, "cron"),  # both given
        ({"overlap": "queue"}, "overlap"),
        ({"start": "2026-01-01T00:00:00"}, "start"),
        ({"jitter_seconds": -1}, "jitter_seconds"),
        ({"catchup_window_seconds": "1h"}, "catchup_window_seconds"),
        ({"command": {"day": "{slot_dat}"}}, "command"),
        ({"provider": ""}, "provider"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_declaration_names_its_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_spec("t", "nightly", GOOD | change, key_limit=200)
    assert caught.value.field == field


def test_a_name_that_cannot_be_a_key_is_refused() -> None:
    with pytest.raises(ScheduleError, match=r"^name:"):
        parse_spec("t", "Nightly Export", GOOD, key_limit=200)
    with pytest.raises(ScheduleError, match=r"^name: too long"):
        parse_spec("t", "n" * 90, GOOD, key_limit=100)


def test_schedule_files_are_checked_with_file_and_field_named(tmp_path: Path) -> None:
    (tmp_path / "acme.toml").write_text(
        'tenant = "acme"\n\n[schedules.nightly]\ncron = "30 2 * * *"\n'
        'timezone = "Europe/Berlin"\nprovider = "sandbox"\ncommand = { kind = "export" }\n\n'
        '[schedules.hourly]\ninterval_seconds = 3600\ntimezone = "Mars/Olympus"\n'
        'provider = "sandbox"\ncommand = { kind = "export" }\n'
    )
    (tmp_path / "broken.toml").write_text("tenant = \n")
    (tmp_path / "other.toml").write_text('[schedules.x]\ncron = "* * * * *"\n')
    found, errors = check_schedules(tmp_path, key_limit=200, submission=None, now=T0)
    assert [d.spec.name for d in found] == ["nightly"]
    assert errors[0].startswith("acme.toml: schedules.hourly.timezone: unknown IANA time zone")
    assert errors[1].startswith("broken.toml: not valid TOML")
    assert errors[2] == "other.toml: tenant: required: the tenant whose schedules these are"
