"""One pure function from a decided action to what must be written.

``plan`` is the only place that assembles row changes and history events from
an action: escalation (with its hops and the cancelling rule), waits with
their delay source, the observation of a provider answer. The shell writes the
``Plan`` in one fenced transaction and schedules ``next_at``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from jobwarden.models.actions import (
    STOP_VIA,
    Accept,
    Action,
    Collect,
    Decided,
    DelaySource,
    Escalate,
    Finish,
    Move,
    NotYet,
    Open,
    Record,
    Retry,
    Send,
    Succeed,
    Wait,
)
from jobwarden.models.history.chain import EventDraft, EventKind
from jobwarden.models.history.excerpts import excerpt, scrub_text
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.plan import Plan, StoredResult
from jobwarden.models.provider.signals import RawResponse
from jobwarden.models.states import TERMINAL, is_allowed
from jobwarden.models.states import OperationState as S


def wake_changes(at: datetime | None, now: datetime, max_countdown: float) -> RowChanges:
    """next_poll_at is the timer; a short wait also gets a countdown message (dispatched_at)."""
    if at is None:
        return {"next_poll_at": None, "dispatched_at": None}
    parked = (at - now).total_seconds() > max_countdown
    return {"next_poll_at": at, "dispatched_at": None if parked else at}


def timed(p: Plan, step: str, seconds: float) -> Plan:
    """``p`` with the step's name and duration (seconds, up to its write) on its last event.

    /metrics reads them from the history (``jobwarden_step_duration_seconds``): the step
    runs in a worker, the figure is served by the API, and the history is what both see.
    """
    if not p.events:
        return p
    last = p.events[-1]
    timing = {"step": step, "step_seconds": round(max(seconds, 0.0), 6)}
    return replace(
        p, events=(*p.events[:-1], replace(last, excerpt={**(last.excerpt or {}), **timing}))
    )


def wait_event(wait: Wait, *, actor: str, now: datetime) -> EventDraft:
    """The decision to wait, with the source of the delay (DESIGN: every wait says why)."""
    excerpt: dict[str, Any] = {
        "next_poll_at": wait.until.isoformat(),
        "delay_seconds": round(wait.delay_seconds, 3),
        "clipped_to_deadline": wait.clipped_to_deadline,
    }
    if wait.estimated_finish is not None:
        excerpt["estimated_finish"] = wait.estimated_finish.isoformat()
        excerpt["evidence"] = wait.evidence
    return EventDraft(
        kind=EventKind.decision,
        actor=actor,
        at=now,
        cause=wait.cause,
        delay_source=wait.delay_source.value,
        excerpt=excerpt,
    )


def _answer_fields(
    raw: RawResponse | None, seen: Mapping[str, Any], secrets: Sequence[str]
) -> dict[str, Any]:
    if raw is None:
        return {}
    request_id = raw.provider_request_id
    return {
        "http_status": raw.observation.status_code,
        "provider_request_id": scrub_text(request_id, secrets)[:200] if request_id else None,
        "excerpt": excerpt(raw, secrets, **seen),
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class _Draft:
    """What every action's plan starts from: the operation, the moment, the answer."""

    op: Operation
    actor: str
    now: datetime
    max_countdown: float
    carried: dict[str, Any]  # the answer's http status, request id and excerpt, if any

    def event(self, kind: EventKind, to: S | None, **extra: Any) -> EventDraft:
        return EventDraft(
            kind=kind,
            actor=self.actor,
            at=self.now,
            from_state=self.op.state.value if to is not None else None,
            to_state=to.value if to is not None else None,
            **extra,
        )

    def wake(self, at: datetime | None) -> RowChanges:
        return wake_changes(at, self.now, self.max_countdown)

    def wait(self, wait: Wait) -> EventDraft:
        return wait_event(wait, actor=self.actor, now=self.now)


_PROVIDER_SOURCES = (DelaySource.provider_retry_after, DelaySource.provider_poll_hint)


def _carries_answer(action: Action) -> bool:
    """Actions whose own event records the answer; the rest get an ``observed`` first."""
    return isinstance(action, Accept | Retry | Succeed) or (
        isinstance(action, Finish)
        and action.event in (EventKind.create_refused, EventKind.result_rejected)
    )


def plan(
    op: Operation,
    decided: Decided,
    *,
    actor: str,
    now: datetime,
    answer: RawResponse | None,
    max_countdown: float,
    secrets: Sequence[str] = (),
) -> Plan:
    """Row changes, events and the next wake-up for ``decided`` (nothing is written here).

    ``answer`` is the provider answer the decision read, if any: it is recorded
    either inside the action's own event (accepted, refused, result endings) or as
    an ``observed`` event first, so every answer is in the history exactly once; a
    status answer followed by a wait is one ``polled`` event with the decision.
    ``secrets`` are the credential's forms, redacted from whatever is recorded.
    The reserved status request is not planned here: a step settles its plan
    (``models/reservations.py``), which folds in the record of a reserved request that
    left without a claim commit and reserves the next one when the plan waits for it.
    """
    action = decided.action
    if isinstance(action, NotYet):
        return Plan()
    d = _Draft(
        op=op,
        actor=actor,
        now=now,
        max_countdown=max_countdown,
        carried=_answer_fields(answer, decided.seen, secrets),
    )
    changes: RowChanges = {**decided.changes}
    events: list[EventDraft] = []
    own = _PLANNERS[type(action)](d, action)
    if answer is not None:
        changes["last_http_status"] = answer.observation.status_code
        if isinstance(action, Wait) and decided.answered is None:
            # One event per poll: what the status read said and the wait it led to.
            own = replace(own, events=(_polled(d, action),))
        elif not _carries_answer(action):
            events.append(d.event(EventKind.observed, None, cause=decided.answered, **d.carried))
    events.extend(own.events)
    return Plan(
        changes={**changes, **own.changes},
        events=tuple(events),
        next_at=own.next_at,
        result=own.result,
        # Only a decision to wait for a status read reserves it; a recorded step failure
        # (a Move to the same state) must not count a request nobody decided to send.
        waits=isinstance(action, Wait | Accept),
    )


def _polled(d: _Draft, wait: Wait) -> EventDraft:
    decision = wait_event(wait, actor=d.actor, now=d.now)
    return d.event(
        EventKind.polled,
        None,
        cause=wait.cause,
        delay_source=wait.delay_source.value,
        **{**d.carried, "excerpt": {**d.carried.get("excerpt", {}), **(decision.excerpt or {})}},
    )


def _send(d: _Draft, action: Send) -> Plan:
    # The claim: committed before the request leaves, so a crash after it leaves unused
    # reserve (invariant 3) and a create_sent that a later step reads as a lost send.
    to = action.move_to if action.move_to is not d.op.state else None
    changes: RowChanges = {**action.counters, **action.changes}
    if to is not None:
        changes["state"] = to
    if action.wake_at is not None:
        changes |= d.wake(action.wake_at)
    ev = d.event(action.event, to, cause=action.cause, excerpt=dict(action.excerpt))
    return Plan(changes=changes, events=(ev,))


def _wait(d: _Draft, action: Wait) -> Plan:
    changes = d.wake(action.until)
    if action.delay_source in _PROVIDER_SOURCES:
        # Remembered past this wait: a person's early wake-up (cancel, resume) still
        # honours it when the next status request is decided.
        changes["poll_not_before"] = action.until
    return Plan(changes=changes, events=(d.wait(action),), next_at=action.until)


def _move(d: _Draft, action: Move) -> Plan:
    # A move to the state it is in records the decision without a transition.
    to = action.to if action.to is not d.op.state else None
    changes = d.wake(action.wake_at)
    if to is not None:
        changes["state"] = to
    ev = d.event(action.event, to, cause=action.cause)
    return Plan(changes=changes, events=(ev,), next_at=action.wake_at)


def _accept(d: _Draft, action: Accept) -> Plan:
    changes: RowChanges = {
        "state": S.accepted,
        "remote_job_id": action.job_id,
        "status_url": action.status_url,
        "accepted_at": d.now,
        **d.wake(action.wait.until),
    }
    if action.polling_mode is not None:
        changes["polling_mode"] = action.polling_mode
    if action.final_url is not None:
        changes["result_reference"] = action.final_url
    if action.wait.delay_source in _PROVIDER_SOURCES:
        changes["poll_not_before"] = action.wait.until
    accepted = d.event(action.event, S.accepted, **d.carried)
    if action.then is None:
        events = (accepted, d.wait(action.wait))
        return Plan(changes=changes, events=events, next_at=action.wait.until)
    # A synchronous outcome: the create answer already says how the job ended. It passes
    # through observing (each hop an allowed transition) to wherever that outcome leads.
    cause = f"synchronous outcome: the create answer says the job ended ({action.event.value})"
    observing = d.op.with_changes({"state": S.observing})
    hop = EventDraft(
        kind=EventKind.decision,
        actor=d.actor,
        at=d.now,
        from_state=S.accepted.value,
        to_state=S.observing.value,
        cause=cause,
    )
    rest = _PLANNERS[type(action.then)](replace(d, op=observing), action.then)
    return Plan(
        changes={**changes, **rest.changes},
        events=(accepted, hop, *rest.events),
        next_at=rest.next_at,
        result=rest.result,
    )


def _retry(d: _Draft, action: Retry) -> Plan:
    # A failed read spends the transport budget even on create, so a provider that never
    # answers cannot keep an operation retrying past its bounds.
    to = action.to if action.to is not d.op.state else None
    changes = d.wake(action.wait.until)
    if to is not None:
        changes["state"] = to
    if action.counts_transport_failure:
        changes["transport_failures_used"] = d.op.transport_failures_used + 1
    carried = dict(d.carried)
    carried["excerpt"] = {
        **carried.get("excerpt", {}),
        "next_attempt_at": action.wait.until.isoformat(),
    }
    ev = d.event(
        action.event,
        to,
        cause=action.detail,
        delay_source=action.wait.delay_source.value,
        **carried,
    )
    return Plan(changes=changes, events=(ev,), next_at=action.wait.until)


def _collect(d: _Draft, action: Collect) -> Plan:
    changes: RowChanges = {
        "state": S.result_collecting,
        "result_reference": action.result_ref,
        "validation_summary": {"expected": dict(action.expected)},
        "collect_deadline": action.deadline,
        **d.wake(d.now),
    }
    cause = "remote job finished; collect the result"
    ev = d.event(EventKind.decision, S.result_collecting, cause=cause)
    return Plan(changes=changes, events=(ev,), next_at=d.now)


def _finish(d: _Draft, action: Finish) -> Plan:
    if action.clean_up:
        return _cleanup_first(d, action)
    # Terminal: no timer survives it, so the sweeper never wakes an ended operation.
    changes: RowChanges = {"state": action.state, **d.wake(None)}
    extra: dict[str, Any] = dict(d.carried) if _carries_answer(action) else {}
    stored = _stored(action.kept)
    if action.summary is not None:
        summary = dict(action.summary)
        if stored is not None and stored.location is not None:
            summary["location"] = stored.location  # where the kept bytes are
        changes["validation_summary"] = summary
        extra["excerpt"] = summary
    ev = d.event(action.event, action.state, cause=action.reason, **extra)
    return Plan(changes=changes, events=(ev,), result=stored)


def _cleanup_first(d: _Draft, action: Finish) -> Plan:
    """The job ended leaving resources ([cleanup]): not an end yet. The ending is kept in
    ``ended_as`` and reached once the cleanup is confirmed (models/cleanup.py); a
    partial result is stored now, as it would be at the end."""
    to = S.cleanup_pending
    changes: RowChanges = {"state": to, "ended_as": action.state, **d.wake(d.now)}
    extra: dict[str, Any] = dict(d.carried) if _carries_answer(action) else {}
    stored = _stored(action.kept)
    summary: dict[str, Any] = {"ended_as": action.state.value}
    if action.summary is not None:
        summary |= dict(action.summary)
        if stored is not None and stored.location is not None:
            summary["location"] = stored.location
        changes["validation_summary"] = dict(action.summary) | summary
    extra["excerpt"] = {**extra.get("excerpt", {}), **summary}
    cause = f"{action.reason}; the provider left resources: cleaning up before the end"
    ev = d.event(action.event, to, cause=cause, **extra)
    return Plan(changes=changes, events=(ev,), next_at=d.now, result=stored)


def _succeed(d: _Draft, action: Succeed) -> Plan:
    verdict = action.verdict
    summary = (
        verdict.summary() if verdict else {"valid": True, "problem": None, "note": action.note}
    )
    changes: RowChanges = {
        "state": S.succeeded,
        "validation_summary": summary,
        **d.wake(None),
    }
    stored = _stored(action)
    if stored is not None and stored.location is not None:
        summary = summary | {"location": stored.location}
        changes["validation_summary"] = summary
    ev = d.event(EventKind.result_collected, S.succeeded, **{**d.carried, "excerpt": summary})
    return Plan(changes=changes, events=(ev,), result=stored)


def _stored(kept: Succeed | None) -> StoredResult | None:
    """The result row a collection writes: its verdict, and its bytes inline or where the
    store holds them (nothing when neither is there)."""
    if kept is None or kept.verdict is None or (kept.content is None and not kept.location):
        return None
    return StoredResult(
        content=kept.content,
        content_type=kept.content_type,
        verdict=kept.verdict,
        location=kept.location,
    )


def _stop(d: _Draft, action: Escalate) -> Plan:
    """Stop automation: hop through STOP_VIA when there is no direct edge, then escalate."""
    src = d.op.state

    def hop(kind: EventKind, to: S, **extra: Any) -> EventDraft:
        return EventDraft(
            kind=kind, actor=d.actor, at=d.now, from_state=src.value, to_state=to.value, **extra
        )

    events: list[EventDraft] = []
    via = STOP_VIA.get(src)
    if via is not None and not is_allowed(src, action.state):
        events.append(hop(EventKind.decision, via, cause="stopping: " + action.detail))
        src = via
    detail = {"detail": action.detail}
    events.append(hop(EventKind.escalated, action.state, cause=action.reason.value, excerpt=detail))
    changes: RowChanges = {
        "state": action.state,
        "escalation_reason": action.reason,
        "escalation_detail": action.detail,
        "next_poll_at": None,
        "dispatched_at": None,
    }
    if action.keep_job_id is not None:
        changes["remote_job_id"] = action.keep_job_id
    return Plan(changes=changes, events=tuple(events))


def _record(d: _Draft, action: Record) -> Plan:
    """A fact from outside a step: the state and the timer change only where it says so."""
    to = action.to if action.to is not d.op.state else None
    changes: RowChanges = {}
    if to is not None:
        changes["state"] = to
    ends = to is not None and to in TERMINAL
    if ends or action.wake_at is not None:
        # An ending stops the timer, as every ending does; a wake-up sets it (both fields).
        changes |= d.wake(None if ends else action.wake_at)
    ev = d.event(
        action.event,
        to,
        cause=action.cause,
        delay_source=action.delay_source.value if action.delay_source else None,
        excerpt=dict(action.excerpt) if action.excerpt else None,
    )
    return Plan(changes=changes, events=(ev,), next_at=None if ends else action.wake_at)


def _open(d: _Draft, action: Open) -> Plan:
    """The intent's first event: it enters the snapshot's state from no state at all."""
    ev = EventDraft(
        kind=EventKind.intent_recorded,
        actor=d.actor,
        at=d.now,
        to_state=d.op.state.value,
        cause=action.cause,
        excerpt=dict(action.excerpt),
    )
    return Plan(events=(ev,))


# One planner per action: adding an action without one fails at the first plan() call
# and in tests/unit/test_effects.py, never silently.
_PLANNERS: dict[type[Any], Callable[[_Draft, Any], Plan]] = {
    Send: _send,
    Wait: _wait,
    Move: _move,
    Accept: _accept,
    Retry: _retry,
    Collect: _collect,
    Finish: _finish,
    Succeed: _succeed,
    Escalate: _stop,
    Record: _record,
    Open: _open,
}
