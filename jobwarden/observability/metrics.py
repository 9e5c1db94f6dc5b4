"""/metrics for Prometheus: collectors that ask Postgres (and Redis) at scrape time.

The figures come from aggregate queries (jobwarden.models.persistence.metrics_store), never
from a process's memory, so every API process answers the same numbers whichever worker
did the work. Workers are separate processes, often on other hosts: what they did is in
the append-only history in Postgres, which the API reads, so no figure needs Prometheus's
multiprocess mode (a directory of mmap files shared by the processes of one host, which
neither reaches a worker in another container nor survives its restart).

The rules each figure keeps (https://prometheus.io/docs/practices/naming/):
- a counter only grows: it counts rows that are never updated or deleted (events, the
  notification outbox) or counters on the operation rows that are never lowered;
- a figure over the most recent events is a gauge (or a gauge histogram), since the
  window slides;
- an unlabelled series has a sample from the first scrape of an empty database.

A scrape reuses the last answer for ``cache_seconds``: Prometheus (or several of them)
scraping often costs the database one round of queries per period. The period must stay
below the scrape interval: with several API processes, a process's older answer served
after a younger one from another would look like a counter going down.

More figures read from SQL are one more function in ``SQL_FIGURES``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from redis import Redis
from sqlalchemy.orm import Session

from jobwarden.models.humans.notifications import CHANNELS, DeliveryStatus
from jobwarden.models.persistence import metrics_store, notification_store, pause_store
from jobwarden.observability.logs import get_logger
from jobwarden.observability.schedule_metrics import schedule_families

log = get_logger(__name__)
# Every webhook refusal count in Redis under a key prefix, by (provider, reason).
RefusalCounts = Callable[[Redis, str], Mapping[tuple[str, str], int]]
# The rate limiter's counters under a key prefix, by (provider, tenant): tokens granted,
# and seconds refused requests were told to wait.
ShareCounts = Callable[[Redis, str], Mapping[tuple[str, str], tuple[int, float]]]

GAVE_UP = DeliveryStatus.gave_up.value
# The early-request, detection-delay and step-duration figures read this many most recent
# events.
DEFAULT_EVENT_WINDOW = 100_000
# Detection delay buckets (seconds): a poll's lateness ranges from a second to an hour.
DELAY_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
# Step duration buckets (seconds): a poll on a quiet machine takes a few milliseconds, a
# result download or a slow provider up to the whole-request deadline.
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scrape:
    """What a figure reads: the scrape's session (one snapshot), its time, the event window."""

    session: Session
    now: datetime
    event_window: int


Figures = Callable[[Scrape], Iterable[Metric]]


def _gauge_histogram(
    name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float]
) -> tuple[GaugeHistogramMetricFamily, Callable[[Sequence[str], list[float]], None]]:
    family = GaugeHistogramMetricFamily(name, documentation, labels=list(labels))

    def add(values: Sequence[str], observed: list[float]) -> None:
        counts = [(str(b), sum(v <= b for v in observed)) for b in buckets]
        counts.append(("+Inf", len(observed)))
        family.add_metric(list(values), counts, gsum_value=sum(observed))

    return family, add


def operation_figures(scrape: Scrape) -> Iterable[Metric]:
    """Operations by state, and the requests counted on their rows."""
    counts = metrics_store.operation_counts(scrape.session)
    operations = GaugeMetricFamily(
        "jobwarden_operations", "Operations by state and provider.", labels=["provider", "state"]
    )
    # Counters on the rows, never lowered: a reservation returned unused lowers
    # status_requests_used and drops reserved_request together, so the figure holds.
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
    return [operations, status, creates]


def escalation_figures(scrape: Scrape) -> Iterable[Metric]:
    """Escalations waiting for a human, the oldest's age, and every stop ever counted."""
    waiting = metrics_store.waiting_escalations(scrape.session)
    escalated = notification_store.escalations_by_reason(scrape.session)
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
        oldest.add_metric([provider], (scrape.now - since).total_seconds())
    total = CounterMetricFamily(
        "jobwarden_escalations",
        "Operations whose automation stopped, by provider and reason, counted from the "
        "notification outbox (one row per stop, never deleted).",
        labels=["provider", "reason"],
    )
    for (provider, reason), n in sorted(escalated.items()):
        total.add_metric([provider, reason], n)
    return [escalations, total, oldest]


def notification_figures(scrape: Scrape) -> Iterable[Metric]:
    outbox = notification_store.by_status(scrape.session)
    notifications = GaugeMetricFamily(
        "jobwarden_notifications",
        "Notification outbox rows by channel and status (pending, delivered, gave_up, no_target).",
        labels=["channel", "status"],
    )
    for (channel, state), n in sorted(outbox.items()):
        notifications.add_metric([channel, state], n)
    # A row that gave up stays gave_up and is never deleted: their number only grows. One
    # series per channel from the first scrape, so the alert's increase() sees the first.
    given_up = CounterMetricFamily(
        "jobwarden_notifications_given_up",
        "Notifications whose delivery gave up (attempts or age ran out), by channel.",
        labels=["channel"],
    )
    for channel in CHANNELS:
        given_up.add_metric([channel.value], outbox.get((channel.value, GAVE_UP), 0))
    return [notifications, given_up]


def sweeper_figures(scrape: Scrape) -> Iterable[Metric]:
    """One sweeper serves every provider: its lag is one unlabelled figure, 0 when idle."""
    due = metrics_store.oldest_due(scrape.session, scrape.now)
    lag = GaugeMetricFamily(
        "jobwarden_sweeper_lag_seconds",
        "Now minus the earliest wake-up time already reached by an active operation "
        "(0 when none is due).",
    )
    earliest = min(due.values(), default=None)
    lag.add_metric(
        [], 0.0 if earliest is None else max(0.0, (scrape.now - earliest).total_seconds())
    )
    return [lag]


def recent_figures(scrape: Scrape) -> Iterable[Metric]:
    """Figures over the most recent events: gauges, because the window slides."""
    recent = metrics_store.recent_facts(scrape.session, scrape.event_window)
    early = GaugeMetricFamily(
        "jobwarden_early_status_requests",
        "Status requests recorded before the end of a wait the provider asked for "
        "(Retry-After or poll hint), over the most recent events. Must stay 0.",
    )
    early.add_metric([], sum(recent.early_requests.values()))
    delays, add_delays = _gauge_histogram(
        "jobwarden_detection_delay_seconds",
        "Observed end of a remote job minus the first evidence it could be seen (the last "
        "pending answer, or a verified webhook after it), over the most recent events.",
        ["provider"],
        DELAY_BUCKETS,
    )
    for provider in sorted({p for p, _ in recent.detection_delays}):
        add_delays([provider], [s for p, s in recent.detection_delays if p == provider])
    steps, add_steps = _gauge_histogram(
        "jobwarden_step_duration_seconds",
        "How long a worker's step took, from its start to its write (the provider request "
        "included), by provider and step, over the most recent events.",
        ["provider", "step"],
        STEP_BUCKETS,
    )
    for provider, step in sorted({(p, st) for p, st, _ in recent.step_durations}):
        add_steps(
            [provider, step],
            [s for p, st, s in recent.step_durations if (p, st) == (provider, step)],
        )
    return [early, delays, steps]


def provider_answer_figures(scrape: Scrape) -> Iterable[Metric]:
    """Provider answers ever recorded, by status class: counted from the history."""
    answers = CounterMetricFamily(
        "jobwarden_provider_responses",
        "Provider answers recorded, by provider and status class (2xx, 3xx, 4xx without "
        "429, 429, 5xx; none: no answer came, a timeout, reset, DNS or TLS failure).",
        labels=["provider", "status_class"],
    )
    for (provider, status_class), n in sorted(
        metrics_store.provider_answers(scrape.session).items()
    ):
        answers.add_metric([provider, status_class], n)
    return [answers]


def pause_figures(scrape: Scrape) -> Iterable[Metric]:
    """Operations a pause holds parked, per provider (issue 39); a provider without any
    reads as no sample, as an empty state does in jobwarden_operations."""
    parked = GaugeMetricFamily(
        "jobwarden_paused_operations",
        "Operations parked by a pause (they send nothing until it is resumed), by provider.",
        labels=["provider"],
    )
    for provider, n in sorted(pause_store.parked_counts(scrape.session).items()):
        parked.add_metric([provider], n)
    return [parked]


# Every figure read from Postgres, in the order served; one snapshot session for all.
def schedule_figures(scrape: Scrape) -> Iterable[Metric]:
    """The schedules' lag and missed slots (jobwarden/observability/schedule_metrics.py)."""
    return schedule_families(scrape.session, scrape.now)


SQL_FIGURES: tuple[Figures, ...] = (
    operation_figures,
    escalation_figures,
    notification_figures,
    sweeper_figures,
    recent_figures,
    provider_answer_figures,
    pause_figures,
    schedule_figures,
)


def collect_families(
    url: str,
    now: datetime,
    *,
    event_window: int = DEFAULT_EVENT_WINDOW,
    figures: Sequence[Figures] = SQL_FIGURES,
) -> list[Metric]:
    """Every metric family read from Postgres now, in one read-only snapshot."""
    with metrics_store.scrape_session(url) as session:
        scrape = Scrape(session=session, now=now, event_window=event_window)
        return [family for figure in figures for family in figure(scrape)]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class PostgresCollector(Collector):
    """Answers a scrape from Postgres, reusing an answer younger than ``cache_seconds``."""

    def __init__(  # noqa: PLR0913 - each a knob the tests turn
        self,
        url: str,
        *,
        cache_seconds: float = 5.0,
        event_window: int = DEFAULT_EVENT_WINDOW,
        clock: Callable[[], datetime] = _utcnow,
        timer: Callable[[], float] = time.monotonic,
        figures: Sequence[Figures] = SQL_FIGURES,
    ) -> None:
        self.url = url
        self.cache_seconds = cache_seconds
        self.event_window = event_window
        self.clock = clock
        self.timer = timer
        self.figures = tuple(figures)
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Metric]] | None = None

    def collect(self) -> Iterator[Metric]:
        # One scrape at a time reads the database; concurrent scrapes share its answer.
        with self._lock:
            if self._cached is None or self.timer() - self._cached[0] >= self.cache_seconds:
                families = collect_families(
                    self.url, self.clock(), event_window=self.event_window, figures=self.figures
                )
                self._cached = (self.timer(), families)
            yield from self._cached[1]

    def describe(self) -> Iterable[Metric]:
        return []  # no query at registration time


class WebhookRefusalCollector(Collector):
    """Refused webhook deliveries, counted in Redis by the receiver (tasks/provider/webhooks.py).

    A refusal leaves no row in Postgres (nothing of a forged delivery is kept), so its
    count lives in one Redis hash that only grows. Redis down: the family is left out of
    the scrape (with a warning), the Postgres figures are still served. ``counts`` reads
    that hash (the receiver's ``refusal_counts``, handed in by the API: observability
    never imports the shell).

    With ``shares`` (the rate limiter's ``share_counts``) it also serves the fair shares
    at each provider's rate limit, counted by the limiter's own script in the same Redis
    for the same reason (a refusal is a wait, not a row; a grant's row is the request's
    event, but summing those per tenant at scrape time would read the whole history):
    ``jobwarden_rate_limit_grants_total`` and ``jobwarden_rate_limit_wait_seconds_total``
    by provider and tenant. A tenant's share is its grants over the provider's, e.g.
    ``sum by (tenant) (rate(jobwarden_rate_limit_grants_total{provider="p"}[5m])) / ignoring
    (tenant) group_left sum(rate(jobwarden_rate_limit_grants_total{provider="p"}[5m]))``.
    """

    def __init__(
        self,
        redis_url: str,
        key_prefix: str,
        *,
        counts: RefusalCounts,
        shares: ShareCounts | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.key_prefix = key_prefix
        self.counts = counts
        self.shares = shares
        self._client: Redis | None = None
        self._lock = threading.Lock()

    def _redis(self) -> Redis:
        with self._lock:
            # Made on first scrape, after uvicorn forked its workers.
            if self._client is None:
                self._client = Redis.from_url(
                    self.redis_url, socket_timeout=2, socket_connect_timeout=2
                )
            return self._client

    def collect(self) -> Iterator[Metric]:
        try:
            counts = self.counts(self._redis(), self.key_prefix)
            shares = {} if self.shares is None else self.shares(self._redis(), self.key_prefix)
        except Exception as exc:  # any Redis failure: leave the family out, say why once
            log.warning("metrics_redis_unavailable", error=type(exc).__name__)
            return
        refusals = CounterMetricFamily(
            "jobwarden_webhook_refusals",
            "Webhook deliveries refused, by provider and reason (unsigned, forged, stale, "
            "malformed, too_large).",
            labels=["provider", "reason"],
        )
        for (provider, reason), n in sorted(counts.items()):
            refusals.add_metric([provider, reason], n)
        yield refusals
        if self.shares is None:
            return
        grants = CounterMetricFamily(
            "jobwarden_rate_limit_grants",
            "Tokens the shared rate limiter granted, by provider and tenant (a tenant's share "
            "of a provider's rate is its grants over the provider's).",
            labels=["provider", "tenant"],
        )
        waits = CounterMetricFamily(
            "jobwarden_rate_limit_wait_seconds",
            "Seconds requests were told to wait for the shared rate limiter, by provider and "
            "tenant.",
            labels=["provider", "tenant"],
        )
        for (provider, tenant), (granted, waited) in sorted(shares.items()):
            grants.add_metric([provider, tenant], granted)
            waits.add_metric([provider, tenant], waited)
        yield grants
        yield waits

    def describe(self) -> Iterable[Metric]:
        return []

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


class ProcessFigures(Collector):
    """prometheus_client's process figures (CPU seconds, resident memory, open file
    descriptors, start time) and Python's (garbage collection, version) for this process,
    each sample labelled with its ``pid``.

    The label is why this wraps the library's collectors rather than registering them
    bare: the API runs several worker processes behind one port, and a scrape lands on
    any of them, so unlabelled ``process_cpu_seconds_total`` would jump between
    processes and read as counter resets. Per pid, each series is one process's own.
    """

    def __init__(self) -> None:
        self._sources: list[Collector] = [
            ProcessCollector(registry=None),
            PlatformCollector(registry=None),
            # GCCollector registers itself and takes no None: a registry of its own.
            GCCollector(registry=CollectorRegistry(auto_describe=False)),
        ]

    def collect(self) -> Iterator[Metric]:
        pid = str(os.getpid())  # a forked worker is another process
        for source in self._sources:
            for family in source.collect():
                labelled = Metric(family.name, family.documentation, family.type, family.unit)
                for sample in family.samples:
                    labelled.add_sample(
                        sample.name, {**sample.labels, "pid": pid}, sample.value, sample.timestamp
                    )
                yield labelled

    def describe(self) -> Iterable[Metric]:
        return []


def registry_for(*collectors: Collector, process: bool = True) -> CollectorRegistry:
    """A registry of ``collectors`` and, unless ``process`` is False, the serving
    process's own figures (``ProcessFigures``)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    if process:
        registry.register(ProcessFigures())
    return registry


def exposition(registry: CollectorRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """The registry in the format ``accept`` asks for, and its content type.

    OpenMetrics when the Accept header names application/openmetrics-text (as Prometheus
    sends it), else the text format 0.0.4 — prometheus_client's own negotiation.
    """
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
