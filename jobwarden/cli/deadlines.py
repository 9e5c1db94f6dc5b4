"""The deadlines `jobwarden show` prints, each with whether it still applies.

A deadline is a stored instant; whether it matters depends on the state. While an
operation awaits approval its provider deadlines are not running: approving moves them
by the time spent waiting (DESIGN invariant 13), so the stored instants, already past
after a long wait, are shown as the time the operation will have once approved. Once
the remote job exists the create deadline is met; once the operation has ended none
applies. Everything else is ``in 5m`` or ``passed 2h 3m ago`` against ``now``. Pure:
``now`` is the caller's, so a test moves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobwarden.models.operation import Operation


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadlineView:
    name: str  # create, result, cancel, collect, business, approval window
    at: datetime | None
    applies: bool  # False: not running yet, met, or the operation ended
    passed: bool  # applies and already past
    note: str  # what a person reads after the instant

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "at": self.at.isoformat() if self.at else None,
            "applies": self.applies,
            "passed": self.passed,
            "note": self.note,
        }


def span(delta: timedelta) -> str:
    """A duration as a person reads it: 45s, 12m 5s, 3h 4m, 2d 1h."""
    seconds = int(abs(delta.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{n}{unit}" for n, unit in parts if n]
    return " ".join(shown[:2]) or "0s"


# The provider deadlines an approval moves by the time spent waiting for it.
BY_APPROVAL = ("create", "result")


def _timed(name: str, at: datetime | None, now: datetime) -> DeadlineView:
    if at is None:
        return DeadlineView(name=name, at=None, applies=False, passed=False, note="not set")
    if at <= now:
        return DeadlineView(
            name=name, at=at, applies=True, passed=True, note=f"passed {span(now - at)} ago"
        )
    return DeadlineView(name=name, at=at, applies=True, passed=False, note=f"in {span(at - now)}")


def _idle(name: str, at: datetime | None, note: str) -> DeadlineView:
    return DeadlineView(name=name, at=at, applies=False, passed=False, note=note)


def deadline_views(row: Operation, now: datetime) -> list[DeadlineView]:
    """Every deadline of ``row`` as `show` prints it (those never set are left out,
    but for the create and result deadlines, which every operation has)."""
    from jobwarden.models.states import TERMINAL, OperationState

    state = OperationState(row.state)
    named = [
        ("create", row.create_deadline),
        ("result", row.result_deadline),
        ("collect", row.collect_deadline),
        ("cancel", row.cancel_deadline),
        ("business", row.business_deadline),
    ]
    views: list[DeadlineView] = []
    for name, at in named:
        if at is None and name not in ("create", "result"):
            continue
        if state in TERMINAL:
            views.append(_idle(name, at, f"no longer applies: the operation is {state.value}"))
        elif state is OperationState.awaiting_approval and at is not None and name in BY_APPROVAL:
            # The clock starts at approval: the wait so far is added to the stored instant.
            budget = at - row.created_at
            views.append(_idle(name, at, f"not running until approved ({span(budget)} from then)"))
        elif name == "create" and row.remote_job_id is not None:
            views.append(_idle(name, at, "met: the remote job exists"))
        else:
            views.append(_timed(name, at, now))
    if state is OperationState.awaiting_approval and row.next_poll_at is not None:
        # While awaiting approval the row's next wake-up is the approval window's end.
        window = _timed("approval window", row.next_poll_at, now)
        closed = f"closed {window.note.removeprefix('passed ')}" if window.passed else ""
        views.append(
            DeadlineView(
                name=window.name,
                at=window.at,
                applies=window.applies,
                passed=window.passed,
                note=closed or f"open, closes {window.note}",
            )
        )
    return views


def deadline_lines(views: list[DeadlineView]) -> list[str]:
    """The views as `show`'s aligned lines."""
    return [f"{LABELS[v.name]:<16} {v.at.isoformat() if v.at else '-'} ({v.note})" for v in views]


# Each fits show's 16-character label column.
LABELS = {
    "create": "create deadline",
    "result": "result deadline",
    "collect": "collect deadline",
    "cancel": "cancel deadline",
    "business": "business until",
    "approval window": "approval window",
}
