"""The notification relay: deliver the outbox, remind of approval windows ending.

Both run as their own beat-fired tasks, never inside a step: a step only writes its
outbox rows (in its own statement) and never waits on a receiver. Time is a
parameter (``now``), so tests move a clock instead of sleeping.

A webhook is signed with Standard Webhooks (``webhook-id`` = the outbox event id, the
receiver's dedup key), POSTed with no redirects (the spec's "Delivery success and
failure": a 3xx is a failure) and without reading the answer's body: only the status
decides. 2xx is delivered; anything else is retried with backoff until the policy's
attempts or age run out (models/humans/notifications.py).

A receiver is a stranger's server (issue 33, finding 8): httpx bounds each socket read,
so one dripping its answer a byte at a time held a worker for minutes. Every send is
bounded as a whole by the provider edge's own mechanism (``provider_transport``: one
wall-clock deadline cuts connect, TLS, headers and body together), and deliveries run
on a Celery queue of their own (``Settings.notifications_queue``, consumed by the
``notifications`` worker, never by the workers that poll), one task per tenant with a
due notification, each tenant's under a Redis lock: a slow or dead receiver holds at
most one seat of that worker and delays only its own tenant's notifications.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from redis import Redis
from standardwebhooks import Webhook

from jobwarden.config.celery_app import app
from jobwarden.config.settings import Settings, get_settings
from jobwarden.models.humans.notification_targets import Targets, TenantTargets, load_targets
from jobwarden.models.humans.notifications import (
    DEFAULT_RETRY,
    Channel,
    DeliveryStatus,
    RetryPolicy,
    after_failure,
    bounded_error,
    reminder,
)
from jobwarden.models.persistence import notification_store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.notification_store import Claimed
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.provider.transport import new_client, request_deadline
from jobwarden.tasks.runtime import current, utcnow

log = get_logger("jobwarden.notifications")

# Expiring approvals reminded per tick; more wait for the next tick (they are ordered
# by the window's end, so the most urgent go first).
REMINDERS_PER_TICK = 500
# Tenants handed a delivery task per tick; more wait for the next tick (most overdue first).
TENANTS_PER_TICK = 1000
# A receiver gets at most this many connections from one relay process.
RECEIVER_CONNECTIONS = 4


class DeliveryFailedError(Exception):
    """One attempt failed; its message is stored, so it never holds a secret."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Relay:
    """What a relay tick needs: where the truth is, who gets what, and how to send."""

    database_url: str
    targets: Targets
    client: httpx.Client
    batch: int
    timeout: float
    policy: RetryPolicy = DEFAULT_RETRY
    jitter: Callable[[], float] = random.random
    environ: Callable[[str], str | None] = os.environ.get

    @property
    def hold(self) -> timedelta:
        # Longer than all the sends of one claim (each bounded by ``timeout`` as a whole),
        # so nobody sends a claimed row meanwhile.
        return timedelta(seconds=self.timeout * self.batch + 30)


def make_client(timeout: float) -> httpx.Client:
    """The relay's client: the provider edge's deadline transport (no redirects, no cookies).

    ``timeout`` is also each socket operation's own bound; ``send_webhook`` bounds the
    whole request by it too. Proxies come from the standard variables, as for providers.
    """
    del timeout  # each send passes it (httpx's per-operation timeout and the deadline)
    limits = httpx.Limits(max_connections=RECEIVER_CONNECTIONS * 4, max_keepalive_connections=8)
    return new_client(limits, "jobwarden-notifications")


def _secret(target: TenantTargets, environ: Callable[[str], str | None]) -> str:
    if target.secret_env is not None:
        value = environ(target.secret_env)
        if not value:
            raise DeliveryFailedError(f"signing secret variable {target.secret_env} is not set")
        return value
    assert target.secret_file is not None  # validated at load: one of the two
    try:
        return target.secret_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise DeliveryFailedError(
            f"signing secret file {target.secret_file} cannot be read ({exc.strerror})"
        ) from None


def send_webhook(relay: Relay, target: TenantTargets, c: Claimed, now: datetime) -> None:
    """One signed POST; raises DeliveryFailedError unless the receiver answered 2xx."""
    assert target.url is not None
    body = json.dumps(c.payload, separators=(",", ":"), sort_keys=True)
    try:
        signature = Webhook(_secret(target, relay.environ)).sign(c.event_id, now, body)
    except (ValueError, TypeError) as exc:  # a secret that is not base64 (whsec_…)
        raise DeliveryFailedError(f"signing secret is malformed ({type(exc).__name__})") from None
    headers = {
        "content-type": "application/json",
        "webhook-id": c.event_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }
    try:
        # One deadline for the whole exchange (connect, send, status line and headers): a
        # receiver dripping its answer trips it, not just one that stops. stream(): the
        # answer's body is never read.
        with (
            request_deadline(relay.timeout),
            relay.client.stream(
                "POST", target.url, content=body, headers=headers, timeout=relay.timeout
            ) as answer,
        ):
            status = answer.status_code
    except httpx.HTTPError as exc:
        # The class only: an exception's text may echo the URL, which may be private.
        raise DeliveryFailedError(f"{type(exc).__name__}") from None
    if not 200 <= status < 300:
        raise DeliveryFailedError(f"HTTP {status}")


def send_apprise(relay: Relay, target: TenantTargets, c: Claimed) -> None:
    """Through Apprise (the ``notify`` extra), to the URLs the named variable holds."""
    assert target.apprise_urls_env is not None
    urls = relay.environ(target.apprise_urls_env)
    if not urls:
        raise DeliveryFailedError(f"Apprise URL variable {target.apprise_urls_env} is not set")
    try:
        import apprise  # noqa: PLC0415 - an optional extra, needed only where configured
    except ImportError:
        raise DeliveryFailedError(
            "apprise is not installed (pip install '.[notify]' in the jobwarden checkout)"
        ) from None
    notifier = apprise.Apprise()
    for url in urls.replace("\n", ",").split(","):
        if url.strip() and not notifier.add(url.strip()):
            raise DeliveryFailedError(f"an Apprise URL in {target.apprise_urls_env} is invalid")
    data = c.payload.get("data", {})
    title = f"jobwarden: {c.kind.removeprefix('operation.')} {data.get('operation_id', '')}"
    body = json.dumps(data, indent=1, sort_keys=True)
    if not notifier.notify(title=title, body=body):
        raise DeliveryFailedError("Apprise reported the notification as not sent")


def _target_for(targets: Targets, c: Claimed) -> TenantTargets | None:
    target = targets.of(c.tenant)
    if target is None:
        return None
    wanted = target.url if c.channel == Channel.webhook.value else target.apprise_urls_env
    return target if wanted is not None else None


@dataclass(frozen=True, slots=True, kw_only=True)
class RelayReport:
    claimed: int = 0
    delivered: int = 0
    retrying: int = 0
    gave_up: int = 0
    no_target: int = 0


def relay_once(relay: Relay, *, now: datetime, tenant: str | None = None) -> RelayReport:
    """Claim one batch of due rows (``tenant``'s only, when given; committed), send each,
    record each outcome.

    No transaction is open while a receiver is called. Returns what happened.
    """
    with transaction(relay.database_url) as session:
        claimed = notification_store.claim_due(
            session, now=now, hold=relay.hold, limit=relay.batch, tenant=tenant
        )
    counts = {s: 0 for s in DeliveryStatus}
    for c in claimed:
        status, retry_at, error = _attempt(relay, c, now)
        with transaction(relay.database_url) as session:
            owned = notification_store.record(
                session, c, status=status, now=now, retry_at=retry_at, error=error
            )
        if owned:
            counts[status] += 1
        fields = {"event_id": c.event_id, "channel": c.channel, "attempts": c.attempts}
        if status is DeliveryStatus.gave_up:
            log.warning("notification_gave_up", error=error, **fields)
        elif status is DeliveryStatus.delivered:
            log.info("notification_delivered", **fields)
        elif status is DeliveryStatus.pending:
            log.info("notification_retrying", error=error, retry_at=retry_at, **fields)
    return RelayReport(
        claimed=len(claimed),
        delivered=counts[DeliveryStatus.delivered],
        retrying=counts[DeliveryStatus.pending],
        gave_up=counts[DeliveryStatus.gave_up],
        no_target=counts[DeliveryStatus.no_target],
    )


def _attempt(
    relay: Relay, c: Claimed, now: datetime
) -> tuple[DeliveryStatus, datetime | None, str | None]:
    target = _target_for(relay.targets, c)
    if target is None:
        # Never retried: a target added later gets the next notification, not this one.
        return DeliveryStatus.no_target, None, f"tenant has no {c.channel} target"
    try:
        if c.channel == Channel.webhook.value:
            send_webhook(relay, target, c, now)
        else:
            send_apprise(relay, target, c)
    except DeliveryFailedError as exc:
        error = bounded_error(str(exc))
        retry_at = after_failure(
            attempts=c.attempts,
            created_at=c.created_at,
            now=now,
            jitter=relay.jitter(),
            policy=relay.policy,
        )
        if retry_at is None:
            return DeliveryStatus.gave_up, None, error
        return DeliveryStatus.pending, retry_at, error
    return DeliveryStatus.delivered, None, None


def remind_once(database_url: str, *, now: datetime, lead: timedelta) -> int:
    """Add a reminder for each approval window ending within ``lead``; rows added.

    Keyed by the window's end and inserted ON CONFLICT DO NOTHING: two beats or a
    restart never double one.
    """
    with transaction(database_url) as session:
        due = notification_store.expiring(session, now=now, lead=lead, limit=REMINDERS_PER_TICK)
        return notification_store.add(session, [reminder(op, now=now) for op in due])


# -- the Celery tasks, fired by beat ---------------------------------------------------

_process: dict[int, Relay] = {}


def process_relay(settings: Settings) -> Relay:
    """One relay per worker process (created after the fork), its file read once."""
    relay = _process.get(os.getpid())
    if relay is None:
        relay = Relay(
            database_url=settings.database_url,
            targets=load_targets(settings.notifications_file),
            client=make_client(settings.notify_timeout_seconds),
            batch=settings.notify_batch_size,
            timeout=settings.notify_timeout_seconds,
        )
        _process[os.getpid()] = relay
    return relay


def tenant_lock_key(prefix: str, tenant: str) -> str:
    return f"{prefix}:notify:tenant:{tenant}"


def deliver_for(relay: Relay, redis: Redis, prefix: str, tenant: str, now: datetime) -> bool:
    """Deliver ``tenant``'s due notifications unless a delivery for it already runs.

    The lock (with the claim's hold as its TTL, so a killed worker's lock expires) keeps a
    tenant to one seat of the notifications worker: a slow receiver never takes two.
    False: another delivery holds the tenant; its rows are left for it or the next tick.
    """
    lock = redis.lock(
        tenant_lock_key(prefix, tenant), timeout=relay.hold.total_seconds(), blocking=False
    )
    if not lock.acquire():
        return False
    try:
        relay_once(relay, now=now, tenant=tenant)
    finally:
        # An expired lock (a claim that outlived its hold) is no error: someone else's now.
        if lock.owned():
            lock.release()
    return True


def fan_out(settings: Settings, now: datetime) -> list[str]:
    """Remind of expiring approvals, then hand each tenant with a due notification a
    delivery task of its own on the notifications queue (task_routes)."""
    lead = timedelta(seconds=settings.approval_reminder_seconds)
    if lead:
        remind_once(settings.database_url, now=now, lead=lead)
    with transaction(settings.database_url) as session:
        tenants = notification_store.due_tenants(session, now=now, limit=TENANTS_PER_TICK)
    for tenant in tenants:
        # A delivery older than one tick is covered by the next tick's own.
        deliver.apply_async(
            args=[tenant], expires=settings.notify_interval_seconds, ignore_result=True
        )
    return tenants


@app.task(name="jobwarden.notify", ignore_result=True)
def notify() -> dict[str, Any]:
    return {"tenants": len(fan_out(get_settings(), utcnow()))}


@app.task(name="jobwarden.deliver_notifications", ignore_result=True)
def deliver(tenant: str) -> dict[str, Any]:
    settings = get_settings()
    ran = deliver_for(
        process_relay(settings), current().redis, settings.key_prefix, tenant, utcnow()
    )
    return {"tenant": tenant, "ran": ran}
