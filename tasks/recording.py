"""Shared shell helpers: short transactions, sanitised excerpts, wake-up timing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobwarden.models import store
from jobwarden.models.db import snapshot, transaction
from jobwarden.models.decisions import EscalationReason, Wait
from jobwarden.models.errors import LeaseNotAcquiredError
from jobwarden.models.history import EventDraft, EventKind
from jobwarden.models.states import OperationState as S
from jobwarden.models.tables import OperationRow
from jobwarden.tasks.leases import operation_lease
from jobwarden.tasks.provider_edge import RawResponse
from jobwarden.tasks.runtime import Runtime, utcnow

SECRET_WORDS = ("token", "secret", "password", "authorization", "api_key", "apikey", "credential")
EXCERPT_LIMIT = 2000
EXCERPT_HEADERS = ("retry-after", "location", "operation-location", "idempotent-replayed")


@dataclass(frozen=True, slots=True)
class Next:
    """What the step wants next: run the task for `state` at `at` (None: nothing)."""

    state: str
    at: datetime | None


def read(rt: Runtime, operation_id: uuid.UUID) -> OperationRow | None:
    """The row as a task starts from it; every later write is fenced by its version."""
    with snapshot(rt.settings.database_url) as session:
        return store.load(session, operation_id)


def write(
    rt: Runtime,
    row: OperationRow,
    changes: dict[str, Any],
    drafts: Sequence[EventDraft],
    now: datetime,
) -> OperationRow:
    """One fenced transaction; raises StaleVersionError when another owner wrote first."""
    with transaction(rt.settings.database_url) as session:
        return store.fenced_update(session, row, changes=changes, drafts=drafts, now=now)


def wake_changes(rt: Runtime, at: datetime | None, now: datetime) -> dict[str, Any]:
    """next_poll_at is the timer; a short wait also gets a countdown message (dispatched_at)."""
    if at is None:
        return {"next_poll_at": None, "dispatched_at": None}
    countdown = (at - now).total_seconds()
    parked = countdown > rt.settings.max_countdown_seconds
    return {"next_poll_at": at, "dispatched_at": None if parked else at}


def _scrub(value: Any, depth: int = 0) -> Any:
    if depth > 6:
        return "…"
    if isinstance(value, dict):
        return {
            k: ("[redacted]" if any(w in k.lower() for w in SECRET_WORDS) else _scrub(v, depth + 1))
            for k, v in list(value.items())[:50]
        }
    if isinstance(value, list):
        return [_scrub(v, depth + 1) for v in value[:20]]
    if isinstance(value, str) and len(value) > 300:
        return value[:300] + "…"
    return value


def excerpt(raw: RawResponse, **extra: Any) -> dict[str, Any]:
    """A bounded, secret-free summary of a provider response for the history."""
    obs = raw.observation
    out: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
    if obs.transport_failure is not None:
        out["transport_failure"] = obs.transport_failure.value
        return out
    headers = {h: obs.headers[h] for h in EXCERPT_HEADERS if h in obs.headers}
    if headers:
        out["headers"] = headers
    if obs.body_problem:
        out["body_problem"] = obs.body_problem
        out["body_text"] = raw.content[:200].decode("utf-8", "replace")
    elif obs.body is not None:
        body = _scrub(obs.body)
        if len(json.dumps(body, default=str)) > EXCERPT_LIMIT:
            body = {"truncated": json.dumps(body, default=str)[:EXCERPT_LIMIT]}
        out["body"] = body
    return out


_KEEP = object()


def transition(
    rt: Runtime,
    row: OperationRow,
    to_state: str,
    *,
    kind: EventKind,
    actor: str,
    now: datetime,
    cause: str,
    wake_at: datetime | object | None = _KEEP,
    changes: dict[str, Any] | None = None,
) -> OperationRow:
    """Move to `to_state` with one event saying why; the wake-up changes only if given."""
    update: dict[str, Any] = {"state": to_state, **(changes or {})}
    if wake_at is not _KEEP:
        update.update(wake_changes(rt, wake_at, now))  # type: ignore[arg-type]
    event = EventDraft(
        kind=kind, actor=actor, at=now, from_state=row.state, to_state=to_state, cause=cause
    )
    return write(rt, row, update, [event], now)


# The way from each active state to one where automation has stopped, hop by hop, so that
# every hop is an allowed transition with its own event.
_STOP_PATH: dict[str, list[str]] = {
    S.create_pending.value: [S.escalated.value],
    S.create_unknown.value: [S.reconciling.value, S.escalated.value],
    S.reconciling.value: [S.escalated.value],
    S.accepted.value: [S.observing.value, S.escalated.value],
    S.observing.value: [S.escalated.value],
    S.result_collecting.value: [S.escalated.value],
    S.cancel_requested.value: [S.cancelling.value, S.cancellation_unconfirmed.value],
    S.cancelling.value: [S.cancellation_unconfirmed.value],
}


def stop_automation(
    rt: Runtime, operation_id: uuid.UUID, reason: EscalationReason, detail: str
) -> str | None:
    """Escalate from whatever active state the row is in; returns the state reached."""
    now = utcnow()
    actor = f"worker:{rt.settings.worker_name}"
    try:
        with operation_lease(
            rt.redis, rt.settings.key_prefix, operation_id, rt.settings.lease_ttl_seconds
        ):
            row = read(rt, operation_id)
            if row is None:
                return None
            for hop in _STOP_PATH.get(row.state, []):
                final = hop in (S.escalated.value, S.cancellation_unconfirmed.value)
                row = transition(
                    rt,
                    row,
                    hop,
                    kind=EventKind.escalated if final else EventKind.decision,
                    actor=actor,
                    now=now,
                    cause=reason.value if final else "stopping: " + detail,
                    wake_at=None,
                    changes={"escalation_reason": reason.value, "escalation_detail": detail}
                    if final
                    else None,
                )
            return row.state
    except LeaseNotAcquiredError:
        return None  # its owner meets the same condition and stops it


def wait_event(wait: Wait, *, actor: str, now: datetime, cause: str) -> EventDraft:
    """The decision to wait, with the source of the delay (DESIGN: every wait says why)."""
    return EventDraft(
        kind=EventKind.decision,
        actor=actor,
        at=now,
        cause=cause,
        delay_source=wait.delay_source.value,
        excerpt={
            "next_poll_at": wait.until.isoformat(),
            "delay_seconds": round(wait.delay_seconds, 3),
            "clipped_to_deadline": wait.clipped_to_deadline,
        },
    )


def escalation_event(
    row: OperationRow, to_state: str, reason: str, detail: str, *, actor: str, now: datetime
) -> EventDraft:
    return EventDraft(
        kind=EventKind.escalated,
        actor=actor,
        at=now,
        from_state=row.state,
        to_state=to_state,
        cause=reason,
        excerpt={"detail": detail},
    )


def escalation(
    reason: EscalationReason,
    detail: str,
    actor: str,
    row: OperationRow,
    now: datetime,
    to: S = S.escalated,
) -> tuple[dict[str, Any], list[EventDraft]]:
    """Row changes and the event that stop automation with a reason (not yet written)."""
    changes = {
        "state": to.value,
        "escalation_reason": reason.value,
        "escalation_detail": detail,
        "next_poll_at": None,
        "dispatched_at": None,
    }
    return changes, [escalation_event(row, to.value, reason.value, detail, actor=actor, now=now)]
