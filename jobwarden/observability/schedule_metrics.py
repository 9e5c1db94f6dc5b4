"""The schedules' figures for /metrics: how late the tick runs, and missed slots.

Kept apart from observability/metrics.py (whose ``schedule_figures`` in ``SQL_FIGURES`` calls
``schedule_families`` in the scrape's session) so the schedules own their queries; two
aggregate queries per scrape, on partial indexes.
"""

from __future__ import annotations

from datetime import datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from jobwarden.models.persistence.schedule_tables import ScheduleRow, ScheduleSlotRow
from jobwarden.models.schedules.slots import ScheduleStatus, SlotState


def schedule_families(session: Session, now: datetime) -> list[Metric]:
    """``jobwarden_schedule_lag_seconds`` (now minus the earliest due time an active
    schedule has reached and the tick has not yet decided; 0 when none is due) and
    ``jobwarden_schedule_missed_slots_total`` by tenant and schedule."""
    oldest = session.scalar(
        select(func.min(ScheduleRow.next_due_at)).where(
            ScheduleRow.status == ScheduleStatus.active.value,
            ScheduleRow.next_due_at.is_not(None),
        )
    )
    # Every declared schedule has a series, 0 until it misses a slot: the alert's
    # increase() sees the first miss (a series born at 1 shows no increase).
    missed = session.execute(
        select(ScheduleRow.tenant, ScheduleRow.name, func.count(ScheduleSlotRow.schedule_id))
        .outerjoin(
            ScheduleSlotRow,
            (ScheduleSlotRow.schedule_id == ScheduleRow.schedule_id)
            & (ScheduleSlotRow.state == SlotState.missed.value),
        )
        .group_by(ScheduleRow.tenant, ScheduleRow.name)
        .order_by(ScheduleRow.tenant, ScheduleRow.name)
    ).all()
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
