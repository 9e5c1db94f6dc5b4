"""One pure function from a decided action to what must be written.

``plan`` is the only place that assembles row changes and history events from
an action: escalation (with its hops and the cancelling rule), waits with
their delay source, the observation of a provider answer. The shell writes the
``Plan`` in one fenced transaction and schedules ``next_at``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobwarden.models.actions import (
    STOP_VIA,
    Accept,
    Collect,
    Decided,
    Escalate,
    Finish,
    Move,
    NotYet,
    Retry,
    Send,
    Succeed,
    Wait,
)
from jobwarden.models.excerpts import excerpt
from jobwarden.models.history import EventDraft, EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.results import ResultVerdict
from jobwarden.models.signals import RawResponse
from jobwarden.models.states import OperationState as S
from jobwarden.models.states import is_allowed


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResult:
    """The collected bytes with their integrity data, written with ``succeeded``."""

    content: bytes
    content_type: str | None
    verdict: ResultVerdict


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    changes: Mapping[str, Any] = field(default_factory=dict)
    events: tuple[EventDraft, ...] = ()
    next_at: datetime | None = None  # publish a wake-up for this time (None: nothing)
    result: StoredResult | None = None

    @property
    def empty(self) -> bool:
        return not self.changes and not self.events


def wake_changes(at: datetime | None, now: datetime, max_countdown: float) -> dict[str, Any]:
    """next_poll_at is the timer; a short wait also gets a countdown message (dispatched_at)."""
    if at is None:
        return {"next_poll_at": None, "dispatched_at": None}
    parked = (at - now).total_seconds() > max_countdown
    return {"next_poll_at": at, "dispatched_at": None if parked else at}


def wait_event(wait: Wait, *, actor: str, now: datetime) -> EventDraft:
    """The decision to wait, with the source of the delay (DESIGN: every wait says why)."""
    return EventDraft(
        kind=EventKind.decision,
        actor=actor,
        at=now,
        cause=wait.cause,
        delay_source=wait.delay_source.value,
        excerpt={
            "next_poll_at": wait.until.isoformat(),
            "delay_seconds": round(wait.delay_seconds, 3),
            "clipped_to_deadline": wait.clipped_to_deadline,
        },
    )


def _answer_fields(raw: RawResponse | None, seen: Mapping[str, Any]) -> dict[str, Any]:
    if raw is None:
        return {}
    return {
        "http_status": raw.observation.status_code,
        "provider_request_id": raw.provider_request_id,
        "excerpt": excerpt(raw, **seen),
    }


def plan(
    op: Operation,
    decided: Decided,
    *,
    actor: str,
    now: datetime,
    answer: RawResponse | None,
    max_countdown: float,
) -> Plan:
    """Row changes, events and the next wake-up for ``decided`` (nothing is written here).

    ``answer`` is the provider answer the decision read, if any: it is recorded
    either inside the action's own event (accepted, refused, result endings) or as
    an ``observed`` event first, so every answer is in the history exactly once.
    """
    action = decided.action
    if isinstance(action, NotYet):
        return Plan()
    changes: dict[str, Any] = dict(decided.changes)
    events: list[EventDraft] = []
    carried = _answer_fields(answer, decided.seen)
    if answer is not None:
        changes["last_http_status"] = answer.observation.status_code
    carries_answer = isinstance(action, Accept | Retry | Succeed) or (
        isinstance(action, Finish)
        and action.event in (EventKind.create_refused, EventKind.result_rejected)
    )
    if answer is not None and not carries_answer:
        events.append(
            EventDraft(
                kind=EventKind.observed, actor=actor, at=now, cause=decided.answered, **carried
            )
        )

    def moved(kind: EventKind, to: S | None, **extra: Any) -> EventDraft:
        return EventDraft(
            kind=kind,
            actor=actor,
            at=now,
            from_state=op.state.value if to is not None else None,
            to_state=to.value if to is not None else None,
            **extra,
        )

    def wake(at: datetime | None) -> dict[str, Any]:
        return wake_changes(at, now, max_countdown)

    if isinstance(action, Send):
        to = action.move_to if action.move_to is not op.state else None
        changes |= dict(action.counters) | dict(action.changes)
        if to is not None:
            changes["state"] = to.value
        if action.wake_at is not None:
            changes |= wake(action.wake_at)
        events.append(moved(action.event, to, cause=action.cause, excerpt=dict(action.excerpt)))
        return Plan(changes=changes, events=tuple(events))
    if isinstance(action, Wait):
        events.append(wait_event(action, actor=actor, now=now))
        return Plan(
            changes=changes | wake(action.until), events=tuple(events), next_at=action.until
        )
    if isinstance(action, Move):
        changes |= {"state": action.to.value, **wake(action.wake_at)}
        events.append(moved(action.event, action.to, cause=action.cause))
        return Plan(changes=changes, events=tuple(events), next_at=action.wake_at)
    if isinstance(action, Accept):
        changes |= {
            "state": S.accepted.value,
            "remote_job_id": action.job_id,
            "status_url": action.status_url,
            "accepted_at": now,
            **wake(action.wait.until),
        }
        events.append(moved(action.event, S.accepted, **carried))
        events.append(wait_event(action.wait, actor=actor, now=now))
        return Plan(changes=changes, events=tuple(events), next_at=action.wait.until)
    if isinstance(action, Retry):
        to = action.to if action.to is not op.state else None
        changes |= wake(action.wait.until)
        if to is not None:
            changes["state"] = to.value
        if action.counts_transport_failure:
            changes["transport_failures_used"] = op.transport_failures_used + 1
        carried["excerpt"] = {
            **carried.get("excerpt", {}),
            "next_attempt_at": action.wait.until.isoformat(),
        }
        events.append(
            moved(
                action.event,
                to,
                cause=action.detail,
                delay_source=action.wait.delay_source.value,
                **carried,
            )
        )
        return Plan(changes=changes, events=tuple(events), next_at=action.wait.until)
    if isinstance(action, Collect):
        changes |= {
            "state": S.result_collecting.value,
            "result_reference": action.result_ref,
            "validation_summary": {"expected": dict(action.expected)},
            **wake(now),
        }
        events.append(
            moved(
                EventKind.decision,
                S.result_collecting,
                cause="remote job finished; collect the result",
            )
        )
        return Plan(changes=changes, events=tuple(events), next_at=now)
    if isinstance(action, Finish):
        changes |= {"state": action.state.value, **wake(None)}
        extra: dict[str, Any] = {}
        if action.summary is not None:
            changes["validation_summary"] = dict(action.summary)
        if carries_answer:
            extra = dict(carried)
            if action.summary is not None:
                extra["excerpt"] = dict(action.summary)
        elif action.summary is not None:
            extra["excerpt"] = dict(action.summary)
        events.append(moved(action.event, action.state, cause=action.reason, **extra))
        return Plan(changes=changes, events=tuple(events))
    if isinstance(action, Succeed):
        verdict = action.verdict
        summary = (
            verdict.summary() if verdict else {"valid": True, "problem": None, "note": action.note}
        )
        changes |= {"state": S.succeeded.value, "validation_summary": summary, **wake(None)}
        carried["excerpt"] = summary
        events.append(moved(EventKind.result_collected, S.succeeded, **carried))
        stored = None
        if verdict is not None and action.content is not None:
            stored = StoredResult(
                content=action.content, content_type=action.content_type, verdict=verdict
            )
        return Plan(changes=changes, events=tuple(events), result=stored)
    return _stop(op, action, changes, events, actor=actor, now=now)


def _stop(
    op: Operation,
    action: Escalate,
    changes: dict[str, Any],
    events: list[EventDraft],
    *,
    actor: str,
    now: datetime,
) -> Plan:
    """Stop automation: hop through STOP_VIA when there is no direct edge, then escalate."""
    src = op.state
    via = STOP_VIA.get(src)
    if via is not None and not is_allowed(src, action.state):
        events.append(
            EventDraft(
                kind=EventKind.decision,
                actor=actor,
                at=now,
                from_state=src.value,
                to_state=via.value,
                cause="stopping: " + action.detail,
            )
        )
        src = via
    events.append(
        EventDraft(
            kind=EventKind.escalated,
            actor=actor,
            at=now,
            from_state=src.value,
            to_state=action.state.value,
            cause=action.reason.value,
            excerpt={"detail": action.detail},
        )
    )
    changes |= {
        "state": action.state.value,
        "escalation_reason": action.reason.value,
        "escalation_detail": action.detail,
        "next_poll_at": None,
        "dispatched_at": None,
    }
    if action.keep_job_id is not None:
        changes["remote_job_id"] = action.keep_job_id
    return Plan(changes=changes, events=tuple(events))
