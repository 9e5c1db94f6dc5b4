"""The schedules' figures for /metrics: how late the tick runs, and missed slots.

Kept apart from observability/metrics.py (whose ``schedule_figures`` in ``SQL_FIGURES`` calls
``schedule_families`` in the scrape's session); the two aggregate queries per scrape are
the schedule store's (``schedule_store.lag_and_missed``), with the rest of their SQL.
"""

from __future__ import annotations

from datetime import datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy.orm import Session

from jobwarden.models.persistence.schedule_store import lag_and_missed


def schedule_families(session: Session, now: datetime) -> list[Metric]:
    """``jobwarden_schedule_lag_seconds`` (now minus the earliest due time an active
    schedule has reached and the tick has not yet decided; 0 when none is due) and
    ``jobwarden_schedule_missed_slots_total`` by tenant and schedule."""
    oldest, missed = lag_and_missed(session)
    lag = GaugeMetricFamily(
        "jobwarden_schedule_lag_seconds",
        "Now minus the earliest due slot time of an active schedule not yet decided by the "
        "schedules tick (0 when nothing is due): how far beat's tick is behind.",
    )
    lag.add_metric([], max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)
    missed_total = CounterMetricFamily(
        "jobwarden_schedule_missed_slots",
        "Slots recorded as missed (older than the catch-up window when decided), by schedule.",
        labels=["tenant", "schedule"],
    )
    for tenant, name, n in missed:
        missed_total.add_metric([tenant, name], n)
    return [lag, missed_total]
