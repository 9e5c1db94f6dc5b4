"""/metrics for Prometheus: a collector that asks Postgres at scrape time.

The figures come from aggregate queries (jobwarden.models.persistence.metrics_store), never from
a process's memory, so every API process answers the same numbers whichever worker
did the work. A scrape reuses the last answer for ``cache_seconds``: Prometheus (or
several of them) scraping often costs the database one round of queries per period.
Metric names follow the Prometheus naming conventions (base units, ``_total`` for
counters, https://prometheus.io/docs/practices/naming/).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from jobwarden.models.persistence import metrics_store, notification_store
from jobwarden.models.persistence.db import snapshot
from jobwarden.schedule_metrics import schedule_families

# The early-request and detection-delay figures read this many most recent events.
DEFAULT_EVENT_WINDOW = 100_000
# Detection delay buckets (seconds): a poll's lateness ranges from a second to an hour.
DELAY_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)


def _histogram(delays: list[tuple[str, float]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(
        "jobwarden_detection_delay_seconds",
        "Observed end of a remote job minus the first evidence it could be seen (the last "
        "pending answer, or a verified webhook after it), over the most recent events.",
        labels=["provider"],
    )
    for provider in sorted({p for p, _ in delays}):
        values = [s for p, s in delays if p == provider]
        buckets = [(str(b), sum(v <= b for v in values)) for b in DELAY_BUCKETS]
        buckets.append(("+Inf", len(values)))
        family.add_metric([provider], buckets, sum_value=sum(values))
    return family


def collect_families(
    url: str, now: datetime, *, event_window: int = DEFAULT_EVENT_WINDOW
) -> list[Metric]:
    """Every metric family as Postgres says now (one snapshot session, seven queries)."""
    with snapshot(url) as session:
        counts = metrics_store.operation_counts(session)
        waiting = metrics_store.waiting_escalations(session)
        due = metrics_store.oldest_due(session, now)
        recent = metrics_store.recent_facts(session, event_window)
        escalated = notification_store.escalations_by_reason(session)
        outbox = notification_store.by_status(session)

    operations = GaugeMetricFamily(
        "jobwarden_operations", "Operations by state and provider.", labels=["provider", "state"]
    )
    status = CounterMetricFamily(
        "jobwarden_status_requests",
        "Status requests sent (counted before each left; a reservation not yet spent "
        "is not included).",
        labels=["provider"],
    )
    creates = CounterMetricFamily(
        "jobwarden_create_requests",
        "Create requests sent, same-token retries included (counted before each left).",
        labels=["provider"],
    )
    by_provider: dict[str, tuple[int, int]] = {}
    for c in counts:
        operations.add_metric([c.provider, c.state], c.operations)
        sent, made = by_provider.get(c.provider, (0, 0))
        by_provider[c.provider] = (sent + c.status_requests, made + c.create_attempts)
    for provider, (sent, made) in sorted(by_provider.items()):
        status.add_metric([provider], sent)
        creates.add_metric([provider], made)

    escalations = GaugeMetricFamily(
        "jobwarden_escalations_waiting",
        "Operations whose automation stopped and waits for a human, by reason.",
        labels=["provider", "reason"],
    )
    oldest = GaugeMetricFamily(
        "jobwarden_oldest_waiting_escalation_age_seconds",
        "How long the longest waiting escalation has waited.",
        labels=["provider"],
    )
    oldest_by_provider: dict[str, datetime] = {}
    for w in waiting:
        escalations.add_metric([w.provider, w.reason], w.operations)
        prior = oldest_by_provider.get(w.provider)
        oldest_by_provider[w.provider] = min(w.oldest_since, prior or w.oldest_since)
    for provider, since in sorted(oldest_by_provider.items()):
        oldest.add_metric([provider], (now - since).total_seconds())

    lag = GaugeMetricFamily(
        "jobwarden_sweeper_lag_seconds",
        "Now minus the earliest wake-up time already reached by an active operation.",
        labels=["provider"],
    )
    for provider, at in sorted(due.items()):
        lag.add_metric([provider], max(0.0, (now - at).total_seconds()))

    early = GaugeMetricFamily(
        "jobwarden_early_status_requests",
        "Status requests recorded before the end of a wait the provider asked for "
        "(Retry-After or poll hint), over the most recent events. Must stay 0.",
        labels=["provider"],
    )
    for provider in sorted({c.provider for c in counts}):
        early.add_metric([provider], recent.early_requests.get(provider, 0))

    escalations_total = CounterMetricFamily(
        "jobwarden_escalations",
        "Operations whose automation stopped, by provider and reason, counted from the "
        "notification outbox (one row per stop, never deleted).",
        labels=["provider", "reason"],
    )
    for (provider, reason), n in sorted(escalated.items()):
        escalations_total.add_metric([provider, reason], n)
    notifications = GaugeMetricFamily(
        "jobwarden_notifications",
        "Notification outbox rows by channel and status (pending, delivered, gave_up, no_target).",
        labels=["channel", "status"],
    )
    for (channel, state), n in sorted(outbox.items()):
        notifications.add_metric([channel, state], n)

    return [
        operations,
        status,
        creates,
        escalations,
        escalations_total,
        notifications,
        oldest,
        lag,
        early,
        _histogram(recent.detection_delays),
        *schedule_families(url, now),
    ]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class PostgresCollector(Collector):
    """Answers a scrape from Postgres, reusing an answer younger than ``cache_seconds``."""

    def __init__(
        self,
        url: str,
        *,
        cache_seconds: float = 5.0,
        event_window: int = DEFAULT_EVENT_WINDOW,
        clock: Callable[[], datetime] = _utcnow,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.cache_seconds = cache_seconds
        self.event_window = event_window
        self.clock = clock
        self.timer = timer
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Metric]] | None = None

    def collect(self) -> Iterator[Metric]:
        # One scrape at a time reads the database; concurrent scrapes share its answer.
        with self._lock:
            if self._cached is None or self.timer() - self._cached[0] >= self.cache_seconds:
                families = collect_families(self.url, self.clock(), event_window=self.event_window)
                self._cached = (self.timer(), families)
            yield from self._cached[1]

    def describe(self) -> Iterable[Metric]:
        return []  # no query at registration time


def registry_for(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The text exposition format and its content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST
