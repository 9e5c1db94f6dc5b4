"""Notifications: who must act is told, by a signed message from a durable outbox.

Pure. A write that puts an operation into a state that needs a human (``NOTIFY_STATES``)
also writes one outbox row per channel, in the same statement; the relay
(tasks/humans/notifications.py) delivers them later, so a step never waits on a receiver.

The event id is the receiver's dedup key: Standard Webhooks sends it as ``webhook-id``,
"the same no matter how many times a webhook that has failed is retried"
(standard-webhooks spec, "Verifying webhook authenticity" / "Webhook metadata"). It is
built from the operation id and the seq of the event that made the state change, so
the same write can never produce two ids, and never contains a ``.`` (the spec's
"Signature scheme" section: the id is part of the signed ``{id}.{timestamp}.{body}``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from jobwarden.models.operation import Operation
from jobwarden.models.states import AUTOMATION_STOPPED
from jobwarden.models.states import OperationState as S


class NotificationKind(StrEnum):
    escalated = "operation.escalated"  # automation stopped: escalated, result_timed_out, …
    awaiting_approval = "operation.awaiting_approval"  # a create waits for a human's approval
    approval_expiring = "operation.approval_expiring"  # the approval window ends soon
    # A provider (a tenant's share, or one operation) was paused by a person or a breaker:
    # once per pause and tenant, never once per operation it parks (issue 39).
    provider_paused = "provider.paused"


class Channel(StrEnum):
    webhook = "webhook"  # Standard Webhooks POST to the tenant's URL
    apprise = "apprise"  # chat or email through the tenant's Apprise URLs


class DeliveryStatus(StrEnum):
    pending = "pending"  # due at next_attempt_at
    delivered = "delivered"  # the receiver answered 2xx (Apprise: said it sent)
    gave_up = "gave_up"  # attempts or age ran out; logged
    no_target = "no_target"  # the tenant has no target on this channel: never retried


# Every channel gets a row: which channels a tenant has is configuration, read when the
# relay sends (a target added after the write still gets it), not when the step writes.
CHANNELS: tuple[Channel, ...] = (Channel.webhook, Channel.apprise)

NOTIFY_STATES: frozenset[S] = AUTOMATION_STOPPED | {S.awaiting_approval}

# The detail is the escalation's, already scrubbed when it was written (invariant 9);
# bounded again so a receiver is never sent more than a page.
MAX_DETAIL_CHARS = 500
MAX_ERROR_CHARS = 300


def kind_for(state: S) -> NotificationKind | None:
    """The notification an operation entering ``state`` needs; None for most states."""
    if state in AUTOMATION_STOPPED:
        return NotificationKind.escalated
    if state is S.awaiting_approval:
        return NotificationKind.awaiting_approval
    return None


def event_id(kind: NotificationKind, operation_id: str, mark: int) -> str:
    """The dedup key: ``escalated:<operation id>:<event seq>`` (reminders: window end)."""
    short = kind.value.removeprefix("operation.")
    return f"{short}:{operation_id}:{mark}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice:
    """One outbox entry as the write produces it (one row per channel in the table)."""

    event_id: str
    kind: NotificationKind
    operation_id: str | None  # None: a notice about a provider, not one operation
    tenant: str
    payload: dict[str, Any]
    created_at: datetime


def console_path(operation_id: str) -> str:
    return f"/console/operations/{operation_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """What a notification says about its operation, as the write leaves it."""

    operation_id: str
    tenant: str
    provider: str
    state: S
    trace_id: str
    request_fingerprint: str
    reason: str | None = None
    detail: str | None = None
    next_poll_at: datetime | None = None

    @classmethod
    def of(cls, op: Operation) -> Subject:
        return cls(
            operation_id=str(op.operation_id),
            tenant=op.tenant,
            provider=op.provider,
            state=op.state,
            trace_id=op.trace_id,
            request_fingerprint=op.request_fingerprint,
            reason=op.escalation_reason.value if op.escalation_reason else None,
            detail=op.escalation_detail,
            next_poll_at=op.next_poll_at,
        )


def payload(kind: NotificationKind, subject: Subject, *, at: datetime) -> dict[str, Any]:
    """The body a receiver gets: Standard Webhooks' ``type``/``timestamp``/``data`` shape.

    Nothing secret: ids, names, the state and reason, a bounded detail; no command, no
    provider URL. The detail was scrubbed when the escalation was written (invariant 9).
    """
    data: dict[str, Any] = {
        "operation_id": subject.operation_id,
        "tenant": subject.tenant,
        "provider": subject.provider,
        "state": subject.state.value,
        "reason": subject.reason if kind is NotificationKind.escalated else None,
        "detail": subject.detail[:MAX_DETAIL_CHARS] if subject.detail else None,
        "trace_id": subject.trace_id,
        "console_path": console_path(subject.operation_id),
    }
    if kind is not NotificationKind.escalated:
        # The approval window's end is the awaiting operation's timer (models/approvals).
        ends = subject.next_poll_at
        data["approval_expires_at"] = ends.isoformat() if ends is not None else None
        # What the approver binds the approval to (invariant 13); not a secret.
        data["request_fingerprint"] = subject.request_fingerprint
    return {"type": kind.value, "timestamp": at.isoformat(), "data": data}


def notice(kind: NotificationKind, subject: Subject, *, mark: int, at: datetime) -> Notice:
    return Notice(
        event_id=event_id(kind, subject.operation_id, mark),
        kind=kind,
        operation_id=subject.operation_id,
        tenant=subject.tenant,
        payload=payload(kind, subject, at=at),
        created_at=at,
    )


def notices_for(
    before: Operation, after: Operation, entered: Sequence[tuple[S, int, datetime]]
) -> tuple[Notice, ...]:
    """What a write must add to the outbox: one notice per event entering NOTIFY_STATES.

    ``entered``: (state, seq, at) of each of the write's events that changes the state.
    Only the last state of the write is the one a human meets, so a write whose events
    pass through a stop and leave it again (none does today) notifies only at its end.
    """
    if after.state not in NOTIFY_STATES or after.state is before.state:
        return ()
    hops = [(seq, at) for state, seq, at in entered if state is after.state]
    if not hops:
        return ()
    seq, at = hops[-1]
    kind = kind_for(after.state)
    assert kind is not None  # NOTIFY_STATES and kind_for name the same states
    return (notice(kind, Subject.of(after), mark=seq, at=at),)


def reminder(op: Operation, *, now: datetime) -> Notice:
    """The approval-expiring reminder for an operation awaiting approval.

    Keyed by the window's end: a tick that runs twice, or two beats, insert it once.
    """
    if op.state is not S.awaiting_approval or op.next_poll_at is None:
        raise ValueError("only an operation awaiting approval, with its window, is reminded")
    window_end = int(op.next_poll_at.timestamp())
    return notice(NotificationKind.approval_expiring, Subject.of(op), mark=window_end, at=now)


def paused_notice(  # noqa: PLR0913 - the pause's facts, each named at the one call
    *,
    pause_id: str,
    provider: str,
    tenant: str,
    operation_id: str | None,
    reason: str,
    paused_by: str,
    at: datetime,
) -> Notice:
    """A pause told to one tenant whose operations it holds: keyed by the pause and the
    tenant, so a pause is told once per tenant however many operations it parks, and a
    breaker's opening (one pause) is one notification per incident."""
    data = {
        "pause_id": pause_id,
        "provider": provider,
        "tenant": tenant,
        "operation_id": operation_id,
        "reason": reason[:MAX_DETAIL_CHARS],
        "paused_by": paused_by,
        "console_path": "/console/providers",
    }
    return Notice(
        # The tenant as a name-based UUID (RFC 9562 section 5.5) under the pause's: the id
        # stays within the column's 200 characters for a tenant name of up to 200, holds
        # no ``.`` (it is part of the signed content), and two tenant names never share one.
        event_id=f"paused:{pause_id}:{uuid.uuid5(uuid.UUID(pause_id), tenant)}",
        kind=NotificationKind.provider_paused,
        operation_id=operation_id,
        tenant=tenant,
        payload={
            "type": NotificationKind.provider_paused.value,
            "timestamp": at.isoformat(),
            "data": data,
        },
        created_at=at,
    )


# -- retries -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Exponential backoff with jitter, bounded by attempts and by age.

    The defaults span about a day and a half of 12 attempts (Standard Webhooks,
    "Deliverability and reliability": a schedule spanning days, exponential, jittered).
    """

    first_delay: timedelta = timedelta(seconds=5)
    factor: float = 3.0
    max_delay: timedelta = timedelta(hours=6)
    max_attempts: int = 12
    max_age: timedelta = timedelta(days=3)
    jitter_floor: float = 0.8


DEFAULT_RETRY = RetryPolicy()


def retry_delay(attempts: int, jitter: float, policy: RetryPolicy = DEFAULT_RETRY) -> timedelta:
    """The wait after the ``attempts``-th failed attempt (1-based), scaled by ``jitter``.

    ``jitter`` is a draw in [0, 1], mapped onto [jitter_floor, 1]: retries spread out
    without ever coming sooner than ``jitter_floor`` of the schedule.
    """
    if attempts < 1:
        raise ValueError("attempts counts the failed attempt, from 1")
    raw = policy.first_delay.total_seconds() * policy.factor ** (attempts - 1)
    capped = min(raw, policy.max_delay.total_seconds())
    scale = policy.jitter_floor + (1.0 - policy.jitter_floor) * min(max(jitter, 0.0), 1.0)
    return timedelta(seconds=capped * scale)


def after_failure(
    *,
    attempts: int,
    created_at: datetime,
    now: datetime,
    jitter: float,
    policy: RetryPolicy = DEFAULT_RETRY,
) -> datetime | None:
    """When to try again after a failed attempt; None: give up (attempts or age spent)."""
    if attempts >= policy.max_attempts:
        return None
    at = now + retry_delay(attempts, jitter, policy)
    if at - created_at > policy.max_age:
        return None
    return at


def bounded_error(text: str) -> str:
    """A failure as stored: one line, at most MAX_ERROR_CHARS (callers pass no secret)."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 1] + "…"
