"""An operation's timeline as inline SVG, built from its events by pure functions.

``build_timeline`` reads the history (each request's answer, each wait and the
Retry-After windows providers asked for) into a ``Timeline``; ``render_svg``
draws it. Neither reads the clock or the database, so both are tested without
a browser: an operator sees at a glance that the controller waited when told to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from html import escape
from typing import Any

from jobwarden.models.history.chain import ChainedEvent

# Events that record a provider's answer to one request we sent (or its absence).
ANSWER_KINDS = frozenset(
    {
        "polled",
        "observed",
        "create_accepted",
        "create_replayed",
        "create_ambiguous",
        "create_rate_limited",
        "create_refused",
        "reconciled",
        "cancel_confirmed",
        "result_collected",
        "result_rejected",
    }
)
WIDTH = 900
HEIGHT = 150
MARGIN = 40
AXIS_Y = 100
COLOURS = {
    "ok": "#2e7d32",
    "throttled": "#ef6c00",
    "server_error": "#c62828",
    "refused": "#6a1b9a",
    "no_answer": "#455a64",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    """One request, at the time its answer (or failure) was recorded."""

    at: datetime
    outcome: str  # a key of COLOURS
    label: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitBar:
    start: datetime
    end: datetime
    delay_source: str
    # A wait aimed at the job's finish (progress_estimate, provider_eta): that finish.
    estimated_finish: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """A Retry-After window: the provider asked for no request before ``end``."""

    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Mark:
    """A moment automation stopped or a person acted: escalated, a decision, an approval."""

    at: datetime
    kind: str
    label: str


# Events drawn as marks above the axis, and the word each is labelled with.
MARK_KINDS = {
    "escalated": "stopped",
    "human_decision": "decided",
    "approved": "approved",
    "cancel_requested": "cancel asked",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeline:
    start: datetime
    end: datetime
    ticks: tuple[Tick, ...]
    waits: tuple[WaitBar, ...]
    windows: tuple[Window, ...]
    marks: tuple[Mark, ...]
    deadline: datetime
    budget_used: int
    budget_max: int


def outcome_of(http_status: int | None, excerpt: dict[str, Any]) -> str:
    if "transport_failure" in excerpt or http_status is None:
        return "no_answer"
    if http_status == 429:
        return "throttled"
    if http_status >= 500:
        return "server_error"
    if http_status >= 400:
        return "refused"
    return "ok"


def retry_after_end(value: str, answered_at: datetime) -> datetime | None:
    """When a Retry-After window ends: delay-seconds or an HTTP-date (RFC 9110 §10.2.3).

    None for a value that is neither; the decision recorded what it made of it.
    """
    text = value.strip()
    if text.isdigit():
        return answered_at + timedelta(seconds=int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else None


def _parse_at(raw: object) -> datetime | None:
    if isinstance(raw, datetime):
        return raw
    if isinstance(raw, str):
        try:
            return datetime.fromisoformat(raw)
        except ValueError:
            return None
    return None


def build_timeline(
    events: Sequence[ChainedEvent],
    *,
    deadline: datetime,
    budget_used: int,
    budget_max: int,
    now: datetime,
) -> Timeline:
    """The timeline of ``events`` (in order); the axis runs from the first event to ``now``
    or the last planned wake-up, and to the deadline when that is not far beyond."""
    ticks: list[Tick] = []
    waits: list[WaitBar] = []
    windows: list[Window] = []
    marks: list[Mark] = []
    for ev in events:
        d = ev.draft
        ex = d.excerpt or {}
        kind = d.kind.value
        if kind in MARK_KINDS:
            what = f"{MARK_KINDS[kind]}: {d.cause}" if d.cause else MARK_KINDS[kind]
            marks.append(Mark(at=d.at, kind=kind, label=f"{what} ({d.actor})"))
        if kind in ANSWER_KINDS and (d.http_status is not None or "transport_failure" in ex):
            status = str(d.http_status) if d.http_status is not None else "no answer"
            ticks.append(Tick(at=d.at, outcome=outcome_of(d.http_status, ex), label=status))
            retry_after = (ex.get("headers") or {}).get("retry-after")
            end = retry_after_end(str(retry_after), d.at) if retry_after is not None else None
            if end is not None and end > d.at:
                windows.append(Window(start=d.at, end=end))
        until = _parse_at(ex.get("next_poll_at"))
        if until is not None and until > d.at and d.delay_source:
            finish = _parse_at(ex.get("estimated_finish"))
            waits.append(
                WaitBar(start=d.at, end=until, delay_source=d.delay_source, estimated_finish=finish)
            )
    first = events[0].draft.at if events else now
    ends = [now, *(e.draft.at for e in events[-1:]), *(w.end for w in waits)]
    last = max([*ends, *(w.end for w in windows)])
    span = max((last - first).total_seconds(), 1.0)
    # The deadline stretches the axis only when it is near: an hour away would squash the
    # requests of the first minutes into one pixel; further out it is drawn at the edge.
    if first < deadline <= first + timedelta(seconds=span * 1.5):
        last = max(last, deadline)
    return Timeline(
        start=first,
        end=last,
        ticks=tuple(ticks),
        waits=tuple(waits),
        windows=tuple(windows),
        marks=tuple(marks),
        deadline=deadline,
        budget_used=budget_used,
        budget_max=budget_max,
    )


def _x(tl: Timeline, at: datetime) -> float:
    span = max((tl.end - tl.start).total_seconds(), 1.0)
    frac = min(max((at - tl.start).total_seconds() / span, 0.0), 1.0)
    return round(MARGIN + frac * (WIDTH - 2 * MARGIN), 2)


def _seconds(tl: Timeline, at: datetime) -> str:
    return f"{(at - tl.start).total_seconds():.1f}"


def _finish_mark(tl: Timeline, bar: WaitBar, y: int) -> str:
    """The finish an aimed wait aimed past: a tick across its bar (issue 38)."""
    if bar.estimated_finish is None:
        return ""
    x = _x(tl, bar.estimated_finish)
    at = _seconds(tl, bar.estimated_finish)
    return (
        f'<line class="estimated-finish" x1="{x}" y1="{y - 3}" x2="{x}" y2="{y + 13}" '
        f'stroke="#1565c0" stroke-width="2" data-at="{at}">'
        f"<title>estimated finish: +{at} s</title></line>"
    )


def render_svg(tl: Timeline) -> str:
    """The timeline as one inline <svg>; every shape carries data-* attributes (offsets in
    seconds from the start) so a test, or a curious operator, can read what it shows."""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" role="img" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'aria-label="timeline: {len(tl.ticks)} requests, {len(tl.waits)} waits">',
        f"<title>{len(tl.ticks)} requests; status requests {tl.budget_used} of "
        f"{tl.budget_max}</title>",
    ]
    for w in tl.windows:
        x0, x1 = _x(tl, w.start), _x(tl, w.end)
        parts.append(
            f'<rect class="retry-after" x="{x0}" y="20" width="{round(x1 - x0, 2)}" '
            f'height="{AXIS_Y - 20}" fill="#ffcc80" fill-opacity="0.45" '
            f'data-start="{_seconds(tl, w.start)}" data-end="{_seconds(tl, w.end)}">'
            f"<title>Retry-After: no request until +{_seconds(tl, w.end)} s</title></rect>"
        )
    for i, bar in enumerate(tl.waits):
        x0, x1 = _x(tl, bar.start), _x(tl, bar.end)
        y = 30 + (i % 3) * 18
        source = escape(bar.delay_source)
        parts.append(
            f'<g class="wait" data-start="{_seconds(tl, bar.start)}" '
            f'data-end="{_seconds(tl, bar.end)}" data-delay-source="{source}">'
            f'<rect x="{x0}" y="{y}" width="{max(round(x1 - x0, 2), 1)}" height="10" '
            f'fill="#90caf9"/><text x="{x0 + 2}" y="{y + 8}" font-size="8">'
            f"{source}</text>{_finish_mark(tl, bar, y)}</g>"
        )
    parts.append(
        f'<line class="axis" x1="{MARGIN}" y1="{AXIS_Y}" x2="{WIDTH - MARGIN}" '
        f'y2="{AXIS_Y}" stroke="#333"/>'
    )
    for t in tl.ticks:
        x = _x(tl, t.at)
        parts.append(
            f'<line class="request outcome-{t.outcome}" x1="{x}" y1="{AXIS_Y - 14}" x2="{x}" '
            f'y2="{AXIS_Y + 14}" stroke="{COLOURS[t.outcome]}" stroke-width="3" '
            f'data-at="{_seconds(tl, t.at)}"><title>{escape(t.label)} at '
            f"+{_seconds(tl, t.at)} s</title></line>"
        )
    for m in tl.marks:
        x = _x(tl, m.at)
        parts.append(
            f'<g class="mark mark-{m.kind}" data-at="{_seconds(tl, m.at)}">'
            f'<path d="M{x - 5} {AXIS_Y + 26} L{x + 5} {AXIS_Y + 26} L{x} {AXIS_Y + 17} Z" '
            f'fill="#37474f"/><title>{escape(m.label)} at +{_seconds(tl, m.at)} s</title></g>'
        )
    dx = _x(tl, tl.deadline)
    beyond = " (beyond the axis)" if tl.deadline > tl.end else ""
    parts.append(
        f'<g class="deadline" data-at="{_seconds(tl, tl.deadline)}"><line x1="{dx}" y1="12" '
        f'x2="{dx}" y2="{AXIS_Y + 20}" stroke="#b71c1c" stroke-dasharray="4 2"/>'
        f'<text x="{min(dx, WIDTH - 120)}" y="10" font-size="9">deadline{beyond}</text></g>'
    )
    parts.append(
        f'<text class="budget" x="{MARGIN}" y="{HEIGHT - 12}" font-size="10">'
        f"budget: {tl.budget_used} of {tl.budget_max} status requests; axis "
        f"{(tl.end - tl.start).total_seconds():.0f} s</text>"
    )
    parts.append("</svg>")
    return "".join(parts)
