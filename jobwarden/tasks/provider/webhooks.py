"""Receiving a webhook delivery: verify, deduplicate, record on the operation, wake the poll.

The shell around ``models.provider.webhooks``: it reads the secret by reference, asks the
pure core whether the delivery verifies and what it does to the operation, and
persists that once. A refused delivery (unsigned, forged, stale, malformed, too
large) leaves nothing but a Redis counter. A verified one records its dedup row
and, for a known job, a ``webhook_received`` event in the same transaction, taken
under the operation's lease so a worker mid-step never loses its write to ours.
The status read it may bring forward is the poll step's, with every check it makes.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from redis import Redis
from sqlalchemy.orm import Session

from jobwarden.models.actions import Decided, Record
from jobwarden.models.contracts.contract import ProviderContract, WebhookSpec
from jobwarden.models.errors import (
    GiveUpError,
    LeaseNotAcquiredError,
    RefusedInputError,
    RetryLaterError,
    StaleVersionError,
)
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.persistence.db import snapshot, transaction
from jobwarden.models.persistence.webhook_store import (
    DeliveryRecord,
    operation_for_job,
    record_delivery,
)
from jobwarden.models.provider.webhooks import (
    REFUSAL_STATUS,
    Delivery,
    Refusal,
    Refused,
    WebhookDecision,
    WebhookOutcome,
    WebhookSecretError,
    after_webhook,
    delivery_excerpt,
    verify_delivery,
)
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.dispatch import schedule
from jobwarden.tasks.runtime import Runtime, utcnow
from jobwarden.tasks.steps import Writer, under_lease

log = get_logger("jobwarden.webhooks")

# How long a delivery waits for a worker's step on the same operation to finish. Past
# it the answer is 503 (Standard Webhooks senders retry); shorter than the 15 s a sender
# is recommended to wait for an answer.
LEASE_WAIT_SECONDS = 5.0
# Lost fenced writes in a row before answering 503: someone else keeps writing the row.
MAX_ATTEMPTS = 5
TOO_LARGE = "too_large"  # counted like a refusal; the API answers 413


class WebhookNotConfiguredError(RefusedInputError):
    """No such provider, or its contract has no [webhook] table (404)."""


class WebhookSecretUnavailableError(GiveUpError):
    """The contract's webhook secret is missing or unusable; names its source, never its value."""


class WebhookBusyError(RetryLaterError):
    """The operation stayed busy (lease held, or written under us): deliver again later."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Receipt:
    """What became of one delivery, and the HTTP status it is answered with."""

    status: int
    outcome: str  # a WebhookOutcome value, "duplicate" or "refused"
    detail: str
    refusal: Refusal | None = None
    event_id: str | None = None
    operation_id: uuid.UUID | None = None
    wake_at: datetime | None = None


def refused_key(prefix: str) -> str:
    """One Redis hash of refusal counts, field ``reason:provider`` (a reason has no colon).

    One hash, so /metrics reads every count with one HGETALL rather than a key scan.
    """
    return f"{prefix}:webhooks:refused"


def _field(provider: str, reason: str) -> str:
    return f"{reason}:{provider}"


def count_refusal(redis: Redis, prefix: str, provider: str, reason: str) -> None:
    """Count a refused delivery; a Redis failure must not turn a 401 into a 500."""
    try:
        redis.hincrby(refused_key(prefix), _field(provider, reason), 1)
    except Exception as exc:
        log.warning("webhook_refusal_not_counted", provider=provider, error=type(exc).__name__)


def refused_count(redis: Redis, prefix: str, provider: str, reason: str) -> int:
    """How many deliveries to ``provider`` were refused for ``reason`` (a Refusal or too_large)."""
    value = redis.hget(refused_key(prefix), _field(provider, reason))
    return int(value) if value is not None else 0


def refusal_counts(redis: Redis, prefix: str) -> dict[tuple[str, str], int]:
    """Every refusal count, by (provider, reason)."""
    counts: dict[tuple[str, str], int] = {}
    for field, value in redis.hgetall(refused_key(prefix)).items():
        reason, _, provider = (field.decode() if isinstance(field, bytes) else field).partition(":")
        counts[(provider, reason)] = int(value)
    return counts


def webhook_spec(rt: Runtime, provider: str) -> tuple[ProviderContract, WebhookSpec]:
    contract = rt.contracts.get(provider)
    if contract is None or contract.webhook is None:
        raise WebhookNotConfiguredError(f"no webhook receiver for provider {provider!r}")
    return contract, contract.webhook


def read_secret(contract: ProviderContract, spec: WebhookSpec) -> str:
    """The signing secret from the environment or its file, read per delivery (rotation)."""
    if spec.secret_env:
        value = os.environ.get(spec.secret_env, "").strip()
        if value:
            return value
        where = spec.secret_env
    else:
        assert spec.secret_file is not None
        where = f"secret file {spec.secret_file}"
        try:
            value = Path(spec.secret_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            value = ""
        if value:
            return value
    raise WebhookSecretUnavailableError(f"provider {contract.name}: no webhook secret in {where}")


def receive(rt: Runtime, provider: str, headers: Mapping[str, str], body: bytes) -> Receipt:
    """Verify one delivery to ``provider`` and record what it does; never raises for its content.

    Raises WebhookNotConfiguredError (404), WebhookSecretUnavailableError (a
    configuration fault: 503, the provider retries) and WebhookBusyError (503).
    """
    contract, spec = webhook_spec(rt, provider)
    secret = read_secret(contract, spec)
    lowered = {name.lower(): value for name, value in headers.items()}
    try:
        verified = verify_delivery(spec, secret, lowered, body, now=utcnow())
    except WebhookSecretError as exc:
        where = spec.secret_env or spec.secret_file
        raise WebhookSecretUnavailableError(f"provider {provider}: {exc} (in {where})") from None
    if isinstance(verified, Refused):
        count_refusal(rt.redis, rt.settings.key_prefix, provider, verified.reason.value)
        log.info("webhook_refused", provider=provider, reason=verified.reason.value)
        return Receipt(
            status=REFUSAL_STATUS[verified.reason],
            outcome="refused",
            detail=verified.detail,
            refusal=verified.reason,
        )
    return _record(rt, provider, verified)


class _DuplicateDeliveryError(Exception):
    """This delivery's event id has its dedup row: nothing is written twice."""


def woken_key(prefix: str, operation_id: uuid.UUID) -> str:
    """When a webhook last woke this operation's status read (Unix seconds), for its TTL."""
    return f"{prefix}:webhooks:woke:{operation_id}"


class _Interval:
    """The webhook interval of one operation, read and claimed under its lease.

    Kept in Redis with a TTL, not in the row: it is a rate limit on wake-ups, not a fact
    of the operation's history (the webhook_received event records each wake_at). Losing
    it (a Redis restart) costs at most one early read, which the budget still bounds.
    """

    def __init__(self, rt: Runtime, operation_id: uuid.UUID, seconds: float) -> None:
        self.redis = rt.redis
        self.key = woken_key(rt.settings.key_prefix, operation_id)
        self.seconds = seconds

    def not_before(self) -> datetime | None:
        if self.seconds <= 0:
            return None
        raw = self.redis.get(self.key)
        if raw is None:
            return None
        return datetime.fromtimestamp(float(raw), UTC) + timedelta(seconds=self.seconds)

    def claim(self, decision: WebhookDecision, now: datetime) -> None:
        """Remember a woken read's time, for as long as it holds the next one back."""
        if self.seconds <= 0 or decision.wake_at is None:
            return
        ttl = (decision.wake_at - now).total_seconds() + self.seconds
        self.redis.set(self.key, decision.wake_at.timestamp(), px=max(1, int(ttl * 1000)))


def _record(rt: Runtime, provider: str, delivery: Delivery) -> Receipt:
    with snapshot(rt.settings.database_url) as session:
        op_id = operation_for_job(session, provider, delivery.remote_job_id)
    if op_id is None:
        return _unknown_job(rt, provider, delivery)
    _, spec = webhook_spec(rt, provider)
    interval = _Interval(rt, op_id, spec.min_status_interval_seconds)
    decided: list[WebhookDecision] = []

    def decide(op: Operation, now: datetime) -> Decided:
        decided[:] = [after_webhook(op, now, webhook_not_before=interval.not_before())]
        return _decided(delivery, decided[0])

    def dedup(session: Session, op: Operation, now: datetime) -> None:
        # In the event's transaction: a lost fenced race rolls the dedup row back too,
        # and the reloaded operation is decided again.
        record = DeliveryRecord(
            provider=provider,
            event_id=delivery.event_id,
            job_id=delivery.remote_job_id,
            received_at=now,
            operation_id=op_id,
            outcome=decided[0].outcome,
        )
        if not record_delivery(session, record):
            raise _DuplicateDeliveryError
        # Under the lease, before the write: the next delivery's turn sees this wake-up.
        # Should the fenced write then lose its race, the retry is only held back longer.
        interval.claim(decided[0], now)

    writer = Writer(
        actor=f"webhook:{provider}",
        wait_seconds=min(LEASE_WAIT_SECONDS, rt.settings.lease_ttl_seconds),
        attempts=MAX_ATTEMPTS,
    )
    try:
        written = under_lease(rt, op_id, decide, writer, dedup)
    except _DuplicateDeliveryError:
        return _duplicate(provider, delivery)
    except StaleVersionError:
        raise WebhookBusyError("the operation kept changing; deliver again later", 1.0) from None
    except LeaseNotAcquiredError:
        raise WebhookBusyError("the operation is busy; deliver again later", 1.0) from None
    if written is None:  # pragma: no cover - operations are never deleted
        return _unknown_job(rt, provider, delivery)
    decision = decided[0]
    if decision.wake_at is not None:
        schedule(rt, op_id, written.stored.state, decision.wake_at)
    log.info(
        "webhook_recorded",
        provider=provider,
        event_id=delivery.event_id,
        operation_id=str(op_id),
        outcome=decision.outcome.value,
    )
    return Receipt(
        status=200,
        outcome=decision.outcome.value,
        detail=decision.cause,
        event_id=delivery.event_id,
        operation_id=op_id,
        wake_at=decision.wake_at,
    )


def _decided(delivery: Delivery, decision: WebhookDecision) -> Decided:
    action = Record(
        event=EventKind.webhook_received,
        cause=decision.cause,
        delay_source=decision.delay_source,
        excerpt=delivery_excerpt(delivery, decision),
        wake_at=decision.wake_at,
    )
    return Decided(action=action)


def _unknown_job(rt: Runtime, provider: str, delivery: Delivery) -> Receipt:
    # A job created but not yet accepted here is "unknown" too; its poll observes it anyway.
    record = DeliveryRecord(
        provider=provider,
        event_id=delivery.event_id,
        job_id=delivery.remote_job_id,
        received_at=utcnow(),
        operation_id=None,
        outcome=WebhookOutcome.unknown_job,
    )
    with transaction(rt.settings.database_url) as session:
        new = record_delivery(session, record)
    if not new:
        return _duplicate(provider, delivery)
    log.info(
        "webhook_unknown_job",
        provider=provider,
        event_id=delivery.event_id,
        job_id=delivery.remote_job_id,
    )
    return Receipt(
        status=202,
        outcome=WebhookOutcome.unknown_job.value,
        detail="no operation has this remote job; acknowledged",
        event_id=delivery.event_id,
    )


def _duplicate(provider: str, delivery: Delivery) -> Receipt:
    log.info("webhook_duplicate", provider=provider, event_id=delivery.event_id)
    return Receipt(
        status=200,
        outcome="duplicate",
        detail="this event was recorded before; nothing recorded twice",
        event_id=delivery.event_id,
    )


__all__ = [
    "TOO_LARGE",
    "Receipt",
    "WebhookBusyError",
    "WebhookNotConfiguredError",
    "WebhookSecretUnavailableError",
    "count_refusal",
    "receive",
    "refusal_counts",
    "refused_count",
    "refused_key",
    "webhook_spec",
]
