"""The SQL of provider breakers: incidents opened, probed and closed, each by a compare-and-set.

Helpers take the session and never commit. Opening inserts the incident unless one is
active for the provider (the partial unique index), so two workers tripping the breaker
open it once; a probe is claimed by ``open -> probing`` only when due, so several workers
start exactly one probe.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from jobwarden.models.humans.pauses import SENDING
from jobwarden.models.persistence.breaker_tables import BreakerIncidentRow
from jobwarden.models.persistence.tables import OperationRow
from jobwarden.models.provider.breaker import IncidentState

INCIDENTS = cast(Table, BreakerIncidentRow.__table__)
OPERATIONS = cast(Table, OperationRow.__table__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Incident:
    """One row of breaker_incidents, as read."""

    incident_id: uuid.UUID
    provider: str
    pause_id: uuid.UUID
    state: IncidentState
    reason: str
    evidence: Mapping[str, Any]
    opened_at: datetime
    probe_due_at: datetime
    probe_operation_id: uuid.UUID | None
    probe_started_at: datetime | None
    probes: int
    held_by: str | None
    closed_at: datetime | None
    closed_by: str | None
    close_note: str | None


def _incident(row: Any) -> Incident:
    values = {name: row[name] for name in INCIDENTS.c.keys()}  # noqa: SIM118 - a Table's columns
    values["state"] = IncidentState(values["state"])
    return Incident(**values)


def open_incident(  # noqa: PLR0913 - the row's own facts, each named at the one call
    session: Session,
    *,
    provider: str,
    pause_id: uuid.UUID,
    reason: str,
    evidence: Mapping[str, Any],
    now: datetime,
    probe_due_at: datetime,
) -> Incident | None:
    """The new incident; None when one is already active for ``provider``."""
    inserted = session.execute(
        insert(INCIDENTS)
        .values(
            incident_id=uuid.uuid4(),
            provider=provider,
            pause_id=pause_id,
            state=IncidentState.open.value,
            reason=reason,
            evidence=dict(evidence),
            opened_at=now,
            probe_due_at=probe_due_at,
        )
        .on_conflict_do_nothing()
        .returning(*INCIDENTS.c)
    ).first()
    return _incident(inserted._mapping) if inserted is not None else None


def active(session: Session, provider: str) -> Incident | None:
    found = session.execute(
        select(INCIDENTS).where(
            INCIDENTS.c.provider == provider, INCIDENTS.c.state != IncidentState.closed.value
        )
    ).first()
    return _incident(found._mapping) if found is not None else None


def all_active(session: Session) -> list[Incident]:
    """Every incident not closed (at most one per provider)."""
    rows = session.execute(select(INCIDENTS).where(INCIDENTS.c.state != IncidentState.closed.value))
    return [_incident(r._mapping) for r in rows]


def held(
    session: Session, pause_id: uuid.UUID, tenant: str, *, limit: int
) -> tuple[int, list[uuid.UUID]]:
    """How many of ``tenant``'s operations the incident's pause holds, and the first few."""
    where = (OPERATIONS.c.held_by == pause_id) & (OPERATIONS.c.tenant == tenant)
    count = session.scalar(select(func.count()).select_from(OPERATIONS).where(where))
    first = session.scalars(
        select(OPERATIONS.c.operation_id)
        .where(where)
        .order_by(OPERATIONS.c.operation_id)
        .limit(limit)
    )
    return int(count or 0), list(first)


def latest(session: Session, provider: str) -> Incident | None:
    """The provider's newest incident, active or closed."""
    found = session.execute(
        select(INCIDENTS)
        .where(INCIDENTS.c.provider == provider)
        .order_by(INCIDENTS.c.opened_at.desc())
        .limit(1)
    ).first()
    return _incident(found._mapping) if found is not None else None


def get(session: Session, incident_id: uuid.UUID) -> Incident | None:
    found = session.execute(select(INCIDENTS).where(INCIDENTS.c.incident_id == incident_id)).first()
    return _incident(found._mapping) if found is not None else None


def due(session: Session, now: datetime, *, stale_before: datetime) -> list[Incident]:
    """Open incidents whose cool-down ended, and probing ones whose probe has been out since
    before ``stale_before`` (its answer never came back: a lost message, a killed worker)."""
    rows = session.execute(
        select(INCIDENTS).where(
            ((INCIDENTS.c.state == IncidentState.open.value) & (INCIDENTS.c.probe_due_at <= now))
            | (
                (INCIDENTS.c.state == IncidentState.probing.value)
                & (INCIDENTS.c.probe_started_at < stale_before)
            )
        )
    )
    return [_incident(r._mapping) for r in rows]


def probe_candidate(session: Session, pause_id: uuid.UUID) -> uuid.UUID | None:
    """An operation the pause parked, in a state that sends: observing first (a status read
    is the cheapest, safest test of a provider)."""
    query = (
        select(OPERATIONS.c.operation_id)
        .where(OPERATIONS.c.held_by == pause_id)
        .where(OPERATIONS.c.state.in_([s.value for s in SENDING]))
        .order_by((OPERATIONS.c.state != "observing"), OPERATIONS.c.operation_id)
        .limit(1)
    )
    return session.scalars(query).first()


def start_probe(
    session: Session,
    incident: Incident,
    operation_id: uuid.UUID,
    *,
    now: datetime,
    stale_before: datetime,
) -> bool:
    """Claim the half-open probe for ``operation_id``: True for exactly one caller (a due
    open incident, or a probing one whose probe went stale)."""
    claimed = session.execute(
        update(INCIDENTS)
        .where(INCIDENTS.c.incident_id == incident.incident_id)
        .where(
            ((INCIDENTS.c.state == IncidentState.open.value) & (INCIDENTS.c.probe_due_at <= now))
            | (
                (INCIDENTS.c.state == IncidentState.probing.value)
                & (INCIDENTS.c.probe_started_at < stale_before)
            )
        )
        .values(
            state=IncidentState.probing.value,
            probe_operation_id=operation_id,
            probe_started_at=now,
            probes=INCIDENTS.c.probes + 1,
        )
        .returning(INCIDENTS.c.incident_id)
    ).first()
    return claimed is not None


def probe_failed(
    session: Session, incident_id: uuid.UUID, operation_id: uuid.UUID, *, probe_due_at: datetime
) -> bool:
    """Re-open after a failed probe, the next one due at ``probe_due_at``; False when this
    probe is no longer the incident's (closed, held, or another probe since)."""
    done = session.execute(
        update(INCIDENTS)
        .where(
            INCIDENTS.c.incident_id == incident_id,
            INCIDENTS.c.state == IncidentState.probing.value,
            INCIDENTS.c.probe_operation_id == operation_id,
        )
        .values(
            state=IncidentState.open.value,
            probe_operation_id=None,
            probe_started_at=None,
            probe_due_at=probe_due_at,
        )
        .returning(INCIDENTS.c.incident_id)
    ).first()
    return done is not None


def close(  # noqa: PLR0913 - the closing's facts, each named at the two calls
    session: Session,
    incident_id: uuid.UUID,
    *,
    closed_by: str,
    note: str | None,
    now: datetime,
    probe: uuid.UUID | None = None,
) -> Incident | None:
    """Close the incident; None when it is already closed (or, with ``probe``, when that
    operation is no longer its probe)."""
    query = update(INCIDENTS).where(
        INCIDENTS.c.incident_id == incident_id,
        INCIDENTS.c.state != IncidentState.closed.value,
    )
    if probe is not None:
        query = query.where(
            INCIDENTS.c.state == IncidentState.probing.value,
            INCIDENTS.c.probe_operation_id == probe,
        )
    found = session.execute(
        query.values(
            state=IncidentState.closed.value,
            probe_operation_id=None,
            closed_at=now,
            closed_by=closed_by,
            close_note=note,
        ).returning(*INCIDENTS.c)
    ).first()
    return _incident(found._mapping) if found is not None else None


def hold(session: Session, incident_id: uuid.UUID, *, held_by: str) -> Incident | None:
    """A person holds the breaker open: no probe until they close it. None when closed."""
    found = session.execute(
        update(INCIDENTS)
        .where(
            INCIDENTS.c.incident_id == incident_id,
            INCIDENTS.c.state != IncidentState.closed.value,
        )
        .values(
            state=IncidentState.held.value,
            probe_operation_id=None,
            probe_started_at=None,
            held_by=held_by,
        )
        .returning(*INCIDENTS.c)
    ).first()
    return _incident(found._mapping) if found is not None else None
