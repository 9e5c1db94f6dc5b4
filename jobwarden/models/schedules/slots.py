"""Schedules: which slots are due, and what becomes of each (DESIGN, Schedules).

Pure: every function takes the time it needs as an argument and reads no clock. A
slot is a nominal instant (UTC, whole seconds) the schedule names; it is submitted
with the idempotency key ``schedule:<name>:<slot RFC 3339 UTC>`` by the shell
(tasks/schedules.py), which records one row per (schedule, slot) so a slot is
decided exactly once.

DST: cron slots are computed by cronsim in the schedule's IANA zone, which follows
Debian cron: a local time that does not exist (02:30 on a spring-forward day) fires
once, at the first instant after the gap (03:00); a local time that happens twice
(02:30 on an autumn day) fires once, on its first occurrence. Expressions that name
every hour (``0 * * * *``) fire once per real hour, so twice in the repeated hour, as
they should. Slots are strictly increasing instants, so no instant is ever named twice.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from jobwarden.models.errors import InvalidSubmissionError, RefusedInputError
from jobwarden.models.intake.fingerprint import MAX_DEPTH
from jobwarden.models.intake.reserved_keys import SCHEDULE
from jobwarden.models.provider.fair_shares import check_priority

# Reserved (models/intake/reserved_keys.py): no caller can take a slot's key before its slot.
KEY_PREFIX = SCHEDULE.prefix
# A name is part of an idempotency key and a URL path segment: a plain identifier.
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,99}")
# What a command template may name; anything else in braces is left as written.
PLACEHOLDERS = ("slot", "slot_local", "slot_date", "schedule")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
# The most slots one backfill may name (a person asking for more splits the range).
MAX_BACKFILL_SLOTS = 10_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Bounds (docs/schedules.md, Bounds): each fits the Integer columns (< 2^31) and keeps every
# slot, plus jitter and catch-up, inside datetime's years 1..9999, so no value a file or a
# body may hold can overflow in the tick, the checker or Postgres (issue 33, finding 5).
MAX_INTERVAL_SECONDS = 366 * 86_400
MAX_JITTER_SECONDS = 86_400
MAX_CATCHUP_SECONDS = 366 * 86_400
FIRST_YEAR = 1970
# The cron column's length: a longer expression cronsim accepts would fail only at sync.
MAX_CRON_LENGTH = 200
LAST_YEAR = 9000


@dataclass(eq=False)
class ScheduleError(RefusedInputError):
    """A schedule's declaration or a request about one is invalid; names the field."""

    template = "{field}: {problem}"

    field: str
    problem: str


class OverlapPolicy(StrEnum):
    skip = "skip"  # a slot due while a previous slot's operation is active is skipped
    buffer_one = "buffer_one"  # one such slot waits for it to end; further ones are skipped
    allow_all = "allow_all"  # every slot fires, whatever is still running
    cancel_previous = "cancel_previous"  # the active operations get a cancel request, then fire


class SlotState(StrEnum):
    submitting = "submitting"  # claimed; its submit is not recorded yet (a crash resubmits it)
    fired = "fired"  # submitted; operation_id names the operation
    skipped = "skipped"  # not fired, by the overlap policy (reason says why)
    missed = "missed"  # older than the catch-up window when decided (reason says how late)
    buffered = "buffered"  # waits for the active operation to end (buffer_one)
    refused = "refused"  # intake refused the rendered submission (reason holds the error)


class SlotOrigin(StrEnum):
    beat = "beat"  # decided by the beat-driven tick
    trigger = "trigger"  # a person's "trigger now"
    backfill = "backfill"  # a person's backfill of a past range


class ScheduleStatus(StrEnum):
    active = "active"  # the tick decides its slots
    paused = "paused"  # the tick passes it over; slots that come due meanwhile are missed


class ScheduleAction(StrEnum):
    declared = "declared"  # created or changed from a file or the API
    paused = "paused"
    resumed = "resumed"
    triggered = "triggered"
    backfilled = "backfilled"


# Slot states after which the slot's operation (if any) is the schedule's record.
DECIDED = frozenset(SlotState) - {SlotState.submitting, SlotState.buffered}


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """When a schedule's slots fall: a cron expression in a zone, or a fixed interval."""

    cron: str | None = None
    interval_seconds: int | None = None
    timezone: str = "UTC"
    start_at: datetime | None = None
    end_at: datetime | None = None
    jitter_seconds: int = 0

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSpec:
    """A schedule as declared (a file's table or the API's body), checked."""

    tenant: str
    name: str
    timing: Timing
    provider: str
    command: dict[str, Any]
    overlap: OverlapPolicy = OverlapPolicy.skip
    catchup_window_seconds: int = 900
    concurrency_key: str | None = None
    # The slots' priority at the provider's rate limit (models/provider/fair_shares.py).
    priority: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotDecision:
    slot_at: datetime
    state: SlotState  # submitting (to fire), skipped, missed or buffered
    reason: str | None = None
    cancel_previous: bool = False  # fire only after the active operations got a cancel request


@dataclass(frozen=True, slots=True, kw_only=True)
class TickPlan:
    decisions: tuple[SlotDecision, ...]
    next_slot_at: datetime | None  # the first slot not decided; None: the schedule has ended
    next_due_at: datetime | None  # when it comes due (its slot plus jitter)


def slot_key(name: str, slot_at: datetime) -> str:
    """The slot's idempotency key: the same for every beat, restart and backfill."""
    return f"{KEY_PREFIX}{name}:{rfc3339(slot_at)}"


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _utc(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(microsecond=0)


def slots(timing: Timing, *, start: datetime) -> Iterator[datetime]:
    """Every slot at or after ``start`` (aware), in order, strictly increasing, in UTC,
    within the timing's start and end. Unbounded without an end: callers take what they need."""
    lower = max(start, timing.start_at) if timing.start_at is not None else start
    # cronsim names each instant once, even two local times folding onto the 03:00 after
    # a spring-forward gap (tests/unit/test_schedules.py pins it): a slot is an instant.
    for slot in _raw_slots(timing, lower):
        if timing.end_at is not None and slot > timing.end_at:
            return
        yield slot


def _raw_slots(timing: Timing, lower: datetime) -> Iterator[datetime]:
    if timing.interval_seconds is not None:
        # Anchored at the start (else the epoch), so every process names the same instants.
        anchor = timing.start_at or EPOCH
        step = timing.interval_seconds
        k = max(0, -(-int((lower - anchor).total_seconds()) // step))
        while True:
            yield _utc(anchor + timedelta(seconds=k * step))
            k += 1
    assert timing.cron is not None
    # CronSim yields the times strictly after its start: one second before makes it inclusive.
    local = (lower - timedelta(seconds=1)).astimezone(timing.zone)
    for at in CronSim(timing.cron, local):
        yield _utc(at)


def next_slot(timing: Timing, *, start: datetime) -> datetime | None:
    return next(slots(timing, start=start), None)


def jitter(name: str, slot_at: datetime, jitter_seconds: int) -> timedelta:
    """The slot's delay past its nominal time: fixed per (schedule, slot), so every beat
    agrees on it, and spread over [0, jitter_seconds] across schedules."""
    if jitter_seconds <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{name}|{rfc3339(slot_at)}".encode()).digest()
    return timedelta(seconds=int.from_bytes(digest[:8], "big") % (jitter_seconds + 1))


def due_at(spec: ScheduleSpec, slot_at: datetime) -> datetime:
    return slot_at + jitter(spec.name, slot_at, spec.timing.jitter_seconds)


def plan_tick(
    spec: ScheduleSpec,
    *,
    next_slot_at: datetime,
    now: datetime,
    active: bool,
    buffered: bool,
    limit: int,
) -> TickPlan:
    """Decide every slot from ``next_slot_at`` that is due at ``now``, at most ``limit``.

    ``active``: an operation of an earlier slot has not ended (or its submit is in flight);
    ``buffered``: a slot already waits for it. A slot later than the catch-up window past
    its due time is missed, whatever the overlap policy; the rest follow the policy in
    order, each fired slot counting as active for the next. The plan's next slot is the
    first one left undecided (the limit may leave due slots for the next tick).
    """
    window = timedelta(seconds=spec.catchup_window_seconds)
    decisions: list[SlotDecision] = []
    for slot in slots(spec.timing, start=next_slot_at):
        due = due_at(spec, slot)
        if due > now or len(decisions) >= limit:
            return TickPlan(decisions=tuple(decisions), next_slot_at=slot, next_due_at=due)
        late = now - due
        if late > window:
            reason = (
                f"{int(late.total_seconds())} s late at {rfc3339(now)}, past the catch-up "
                f"window of {spec.catchup_window_seconds} s"
            )
            decisions.append(SlotDecision(slot_at=slot, state=SlotState.missed, reason=reason))
            continue
        decision = overlap_decision(spec.overlap, slot, active=active, buffered=buffered)
        decisions.append(decision)
        if decision.state is SlotState.submitting:
            active = True
        elif decision.state is SlotState.buffered:
            buffered = True
    return TickPlan(decisions=tuple(decisions), next_slot_at=None, next_due_at=None)


def overlap_decision(
    policy: OverlapPolicy, slot_at: datetime, *, active: bool, buffered: bool
) -> SlotDecision:
    """What one due slot within the catch-up window becomes under the overlap policy."""
    if not active or policy is OverlapPolicy.allow_all:
        return SlotDecision(slot_at=slot_at, state=SlotState.submitting)
    if policy is OverlapPolicy.cancel_previous:
        return SlotDecision(slot_at=slot_at, state=SlotState.submitting, cancel_previous=True)
    if policy is OverlapPolicy.buffer_one and not buffered:
        return SlotDecision(
            slot_at=slot_at,
            state=SlotState.buffered,
            reason="waits for the previous slot's operation to end",
        )
    why = "a slot is already buffered" if policy is OverlapPolicy.buffer_one else "overlap skip"
    return SlotDecision(
        slot_at=slot_at,
        state=SlotState.skipped,
        reason=f"previous slot's operation still active ({why})",
    )


def backfill_slots(
    timing: Timing, *, start: datetime, end: datetime, now: datetime
) -> list[datetime]:
    """The slots in [start, end] for a backfill; refuses a range in the future or too long."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ScheduleError("from", "give a time with its UTC offset (2026-01-01T00:00:00Z)")
    first, last = _aware("from", start), _aware("to", end)
    assert first is not None and last is not None
    start, end = first, last
    if end < start:
        raise ScheduleError("to", "is before --from")
    if end > now:
        raise ScheduleError("to", f"is in the future ({rfc3339(end)} > {rfc3339(now)})")
    found: list[datetime] = []
    for slot in slots(timing, start=start):
        if slot > end:
            break
        if len(found) == MAX_BACKFILL_SLOTS:
            raise ScheduleError(
                "to", f"the range holds more than {MAX_BACKFILL_SLOTS} slots: split it"
            )
        found.append(slot)
    return found


def render_command(template: Any, *, name: str, slot_at: datetime, timezone: str) -> Any:
    """The command for one slot: ``{slot}`` (RFC 3339 UTC), ``{slot_local}`` (ISO 8601 in the
    schedule's zone), ``{slot_date}`` (its local date) and ``{schedule}`` in any string."""
    local = slot_at.astimezone(ZoneInfo(timezone))
    values = {
        "slot": rfc3339(slot_at),
        "slot_local": local.isoformat(),
        "slot_date": local.date().isoformat(),
        "schedule": name,
    }

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(template)


def unknown_placeholders(template: Any) -> list[str]:
    """Placeholders a template names that render_command does not fill (likely typos)."""
    found: list[str] = []
    if isinstance(template, str):
        found += [m for m in _PLACEHOLDER.findall(template) if m not in PLACEHOLDERS]
    elif isinstance(template, dict):
        for v in template.values():
            found += unknown_placeholders(v)
    elif isinstance(template, list):
        for v in template:
            found += unknown_placeholders(v)
    return found


def _aware(field: str, value: object) -> datetime | None:
    """A time with its offset, in UTC, within years FIRST_YEAR..LAST_YEAR once in UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise ScheduleError(field, f"not an RFC 3339 time: {_shown(text)}") from None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ScheduleError(field, "must be a time with its UTC offset (2026-01-01T00:00:00Z)")
    try:
        # Year 1 at +14:00 is year 0 in UTC, 9999 at -14:00 is 10000: neither exists.
        at = _utc(value)
    except (OverflowError, ValueError):
        at = None
    if at is None or not FIRST_YEAR <= at.year <= LAST_YEAR:
        raise ScheduleError(field, f"must lie within the years {FIRST_YEAR}..{LAST_YEAR} in UTC")
    return at


def _shown(value: str) -> str:
    """Text for a one-line error: escaped to ASCII and cut short."""
    return ascii(value[:60]) + ("..." if len(value) > 60 else "")


def _int(field: str, value: object, default: int, *, minimum: int, maximum: int) -> int:
    """A whole number within [minimum, maximum]; ``default`` when left out."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        shown = _shown(value) if isinstance(value, str) else type(value).__name__
        raise ScheduleError(field, f"must be a whole number, got {shown}")
    if value < minimum:
        raise ScheduleError(field, f"must be at least {minimum}, got {value}")
    if value > maximum:
        raise ScheduleError(field, f"must be at most {maximum}")
    return value


FIELDS = frozenset(
    {
        "cron",
        "interval_seconds",
        "timezone",
        "start",
        "end",
        "jitter_seconds",
        "provider",
        "command",
        "overlap",
        "catchup_window_seconds",
        "concurrency_key",
        "priority",
    }
)


def parse_spec(tenant: str, name: str, table: dict[str, Any], *, key_limit: int) -> ScheduleSpec:
    """A declared schedule (a TOML table or a JSON body) as a checked ScheduleSpec.

    Raises ScheduleError naming the first field at fault (``timezone``, ``cron`` …).
    ``key_limit`` is the idempotency key column's length: the name must fit in a slot's key.
    """
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ScheduleError("name", f"{name!r} must match {NAME_PATTERN.pattern}")
    if len(slot_key(name, EPOCH)) > key_limit:
        raise ScheduleError("name", f"too long for a slot's idempotency key ({key_limit})")
    unknown = sorted(set(table) - FIELDS)
    if unknown:
        raise ScheduleError(unknown[0], f"unknown field; known: {', '.join(sorted(FIELDS))}")
    timing = _timing(table)
    provider = table.get("provider")
    if not isinstance(provider, str) or not provider:
        raise ScheduleError("provider", "required: the provider contract's name")
    command = table.get("command")
    if not isinstance(command, dict):
        raise ScheduleError("command", "required: a table (the command template)")
    if _nesting(command) > MAX_DEPTH:
        # Before any walk below recurses: a deep template is refused, never a RecursionError.
        raise ScheduleError("command", f"nested deeper than {MAX_DEPTH} levels (intake's bound)")
    typos = unknown_placeholders(command)
    if typos:
        known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
        raise ScheduleError("command", f"unknown placeholder {{{typos[0]}}}; known: {known}")
    try:
        overlap = OverlapPolicy(table.get("overlap", "skip"))
    except ValueError:
        known = ", ".join(p.value for p in OverlapPolicy)
        raise ScheduleError("overlap", f"{table.get('overlap')!r} is not one of {known}") from None
    key = table.get("concurrency_key")
    if key is not None and (not isinstance(key, str) or not key):
        raise ScheduleError("concurrency_key", "must be a non-empty string")
    try:
        priority = check_priority(table.get("priority"))
    except InvalidSubmissionError as exc:
        raise ScheduleError("priority", str(exc).removeprefix("priority ")) from None
    return ScheduleSpec(
        tenant=tenant,
        name=name,
        timing=timing,
        provider=provider,
        command=command,
        overlap=overlap,
        catchup_window_seconds=_int(
            "catchup_window_seconds",
            table.get("catchup_window_seconds"),
            900,
            minimum=0,
            maximum=MAX_CATCHUP_SECONDS,
        ),
        concurrency_key=key,
        priority=priority,
    )


def _nesting(command: dict[str, Any]) -> int:
    """How deep ``command`` nests, counted as intake counts it (its members are at 1);
    without recursion, and stopping once past MAX_DEPTH."""
    deepest = 0
    stack: list[tuple[object, int]] = [(command, 0)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
    return deepest


def _timing(table: dict[str, Any]) -> Timing:
    cron, interval = table.get("cron"), table.get("interval_seconds")
    if (cron is None) == (interval is None):
        raise ScheduleError("cron", "give exactly one of cron and interval_seconds")
    zone = table.get("timezone", "UTC")
    if not isinstance(zone, str):
        raise ScheduleError("timezone", "must be an IANA time zone name (Europe/Berlin)")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError("timezone", f"unknown IANA time zone {zone!r}") from None
    if cron is not None:
        if not isinstance(cron, str):
            raise ScheduleError("cron", "must be a cron expression string")
        if len(cron) > MAX_CRON_LENGTH:
            raise ScheduleError("cron", f"longer than {MAX_CRON_LENGTH} characters")
        try:
            CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC))
        except CronSimError as exc:
            raise ScheduleError("cron", f"{cron!r}: {exc}") from None
    checked = None
    if interval is not None:
        checked = _int("interval_seconds", interval, 0, minimum=1, maximum=MAX_INTERVAL_SECONDS)
    timing = Timing(
        cron=cron,
        interval_seconds=checked,
        timezone=zone,
        start_at=_aware("start", table.get("start")),
        end_at=_aware("end", table.get("end")),
        jitter_seconds=_int(
            "jitter_seconds",
            table.get("jitter_seconds"),
            0,
            minimum=0,
            maximum=MAX_JITTER_SECONDS,
        ),
    )
    if timing.start_at and timing.end_at and timing.end_at < timing.start_at:
        raise ScheduleError("end", "is before start")
    return timing


def with_next_slot(spec: ScheduleSpec, *, now: datetime) -> datetime | None:
    """Where a newly declared schedule starts: its first slot at or after ``now`` (a new
    schedule never fires its past; that is what backfill is for)."""
    return next_slot(spec.timing, start=_utc(now))
