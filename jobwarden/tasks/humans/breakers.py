"""A provider breaker's incident: park what it covers, probe half-open, close, and what a
person does (show, hold, close) through every door (issue 39).

Half-open: the sweeper claims a due incident's probe by a compare-and-set (one probe, however
many workers sweep), names one parked operation as the probe (the hold lets its requests
through) and wakes it; its step reports the answer (tasks/provider/breaker.py). Success
closes the incident and resumes the pause, waking the rest spread by the provider's rate;
failure re-arms the cool-down. A probe whose answer never comes back (a killed worker, a
lost message) is taken again by the sweeper after a while.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobwarden.models.actions import Decided
from jobwarden.models.errors import LostRaceError, RefusedInputError
from jobwarden.models.humans.identity import Author, as_author
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import breaker_store, pause_store
from jobwarden.models.persistence.breaker_store import Incident
from jobwarden.models.persistence.db import snapshot, transaction
from jobwarden.models.provider import breaker as pure
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.dispatch import enqueue
from jobwarden.tasks.humans.pauses import _writer, park_covered, wake_parked
from jobwarden.tasks.provider.breaker import RULE, _key
from jobwarden.tasks.runtime import Runtime, current, utcnow
from jobwarden.tasks.steps import Writer, under_lease

log = get_logger("jobwarden.breaker")


def park_all(rt: Runtime, provider: str) -> int:
    """Park every operation the open incident's pause covers (pauses.park_covered)."""
    with snapshot(rt.settings.database_url) as session:
        incident = breaker_store.active(session, provider)
        pause = pause_store.get(session, incident.pause_id) if incident is not None else None
    if pause is None or not pause.active:
        return 0
    return park_covered(rt, pause, _writer(rt, RULE.actor, None))


def probe_due(rt: Runtime) -> int:
    """Start the half-open probe of every incident whose cool-down ended (the sweeper calls
    this): claim it by a compare-and-set, then wake the one operation it names."""
    now = utcnow()
    started = 0
    with snapshot(rt.settings.database_url) as session:
        incidents = breaker_store.due(session, now, stale_before=now - _stale(rt))
    for incident in incidents:
        started += int(_probe(rt, incident, now))
    return started


def _stale(rt: Runtime) -> timedelta:
    """How long a probe may be out before another is started in its place."""
    return timedelta(seconds=max(rt.settings.lease_ttl_seconds * 2, 10.0))


def _probe(rt: Runtime, incident: Incident, now: datetime) -> bool:
    with transaction(rt.settings.database_url) as tx:
        pause = pause_store.get(tx, incident.pause_id)
        if pause is not None and not pause.active:
            # A person resumed the breaker's pause itself (`jobwarden resume`): the incident
            # ends with it, so the provider's next outage opens a new one.
            assert pause.resumed_by is not None
            breaker_store.close(
                tx, incident.incident_id, closed_by=pause.resumed_by, note="pause resumed", now=now
            )
            return False
        candidate = breaker_store.probe_candidate(tx, incident.pause_id)
        if candidate is None or not breaker_store.start_probe(
            tx, incident, candidate, now=now, stale_before=now - _stale(rt)
        ):
            return False

    def decide(op: Operation, at: datetime) -> Decided | None:
        return pure.probe_wake(op, incident.pause_id, incident.incident_id, at)

    try:
        written = under_lease(
            rt, candidate, decide, Writer(actor=RULE.actor, wait_seconds=2.0, lease_required=False)
        )
    except LostRaceError:
        written = None
    log.warning(
        "breaker_probe_started",
        provider=incident.provider,
        incident_id=str(incident.incident_id),
        operation_id=str(candidate),
    )
    if written is not None:
        enqueue(rt, candidate, written.stored.state)
    return True


def probed(rt: Runtime, provider: str, operation_id: uuid.UUID, ok: bool) -> str:
    """The probe's answer: success closes the incident and resumes the rest spread by the
    rate; failure re-arms the cool-down. Returns what happened."""
    with snapshot(rt.settings.database_url) as session:
        incident = breaker_store.active(session, provider)
    if incident is None or incident.probe_operation_id != operation_id:
        return "not_the_probe"
    contract = rt.contracts.get(provider)
    policy = contract.breaker if contract is not None else None
    if not ok:
        due = utcnow() + timedelta(seconds=policy.cooldown_seconds if policy else 60.0)
        with transaction(rt.settings.database_url) as tx:
            reopened = breaker_store.probe_failed(
                tx, incident.incident_id, operation_id, probe_due_at=due
            )
        log.warning("breaker_probe_failed", provider=provider, reopened=reopened)
        return "reopened" if reopened else "not_the_probe"
    closed = _close(rt, incident, RULE.actor, "the half-open probe succeeded", probe=operation_id)
    return "closed" if closed else "not_the_probe"


def _close(
    rt: Runtime, incident: Incident, by: str, note: str | None, *, probe: uuid.UUID | None = None
) -> bool:
    now = utcnow()
    with transaction(rt.settings.database_url) as tx:
        closed = breaker_store.close(
            tx, incident.incident_id, closed_by=by, note=note, now=now, probe=probe
        )
        if closed is None:
            return False
        ended = pause_store.end(tx, incident.pause_id, resumed_by=by, note=note, now=now)
        pause = ended or pause_store.get(tx, incident.pause_id)
    _forget_window(rt, incident.provider)
    woken = 0
    if pause is not None:
        woken = wake_parked(rt, pause, _writer(rt, by, None), by)
    log.warning(
        "breaker_closed",
        provider=incident.provider,
        incident_id=str(incident.incident_id),
        closed_by=by,
        woken=woken,
    )
    return True


def _forget_window(rt: Runtime, provider: str) -> None:
    """A closed breaker starts from an empty window: the outage's answers are its past."""
    prefix = rt.settings.key_prefix
    keys = [_key(prefix, provider, part) for part in ("first", "last", "samples", "opening")]
    contract = rt.contracts.get(provider)
    if contract is not None and contract.breaker is not None:
        size = pure.bucket_seconds(contract.breaker)
        index = int(utcnow().timestamp() // size)
        keys += [
            _key(prefix, provider, f"b:{i}") for i in range(index - pure.WINDOW_BUCKETS, index + 2)
        ]
    rt.redis.delete(*keys)


# --- what a person does: show, hold, close ------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerView:
    """A provider's breaker as the doors show it."""

    provider: str
    enabled: bool  # the contract has a [breaker] table
    state: str  # closed, open, probing, held
    incident: Incident | None  # the active one, else the newest closed one


def shown(view: BreakerView) -> dict[str, Any]:
    """The breaker as every door shows it (the HTTP answer has the same fields)."""
    found = view.incident
    return {
        "provider": view.provider,
        "enabled": view.enabled,
        "state": view.state,
        "incident": None
        if found is None
        else {
            "incident_id": str(found.incident_id),
            "pause_id": str(found.pause_id),
            "state": found.state.value,
            "reason": found.reason,
            "evidence": dict(found.evidence),
            "opened_at": found.opened_at.isoformat(),
            "probe_due_at": found.probe_due_at.isoformat(),
            "probe_operation_id": str(found.probe_operation_id)
            if found.probe_operation_id
            else None,
            "probes": found.probes,
            "held_by": found.held_by,
            "closed_at": found.closed_at.isoformat() if found.closed_at else None,
            "closed_by": found.closed_by,
        },
    }


def show(provider: str, *, runtime: Runtime | None = None) -> BreakerView:
    rt = runtime or current()
    contract = rt.contracts.get(provider)
    if contract is None:
        raise RefusedInputError(f"provider: no provider {provider!r}")
    with snapshot(rt.settings.database_url) as session:
        found = breaker_store.active(session, provider) or breaker_store.latest(session, provider)
    state = found.state.value if found is not None else "closed"
    return BreakerView(
        provider=provider, enabled=contract.breaker is not None, state=state, incident=found
    )


def open_incidents(*, runtime: Runtime | None = None) -> dict[str, Incident]:
    """The open incidents by provider (the console's providers page)."""
    rt = runtime or current()
    with snapshot(rt.settings.database_url) as session:
        return {i.provider: i for i in breaker_store.all_active(session)}


def _active(rt: Runtime, provider: str) -> Incident:
    if provider not in rt.contracts:
        raise RefusedInputError(f"provider: no provider {provider!r}")
    with snapshot(rt.settings.database_url) as session:
        found = breaker_store.active(session, provider)
    if found is None:
        raise RefusedInputError(f"provider: the breaker of {provider!r} is not open")
    return found


def hold(provider: str, by: Author | str, *, runtime: Runtime | None = None) -> Incident:
    """A person holds the open breaker: no probe until someone closes it."""
    rt = runtime or current()
    author = as_author(by, "held_by")
    incident = _active(rt, provider)
    with transaction(rt.settings.database_url) as tx:
        held = breaker_store.hold(tx, incident.incident_id, held_by=author.actor)
    if held is None:
        raise RefusedInputError(f"provider: the breaker of {provider!r} is not open")
    log.warning("breaker_held", provider=provider, actor=author.actor)
    return held


def close(
    provider: str, by: Author | str, note: str = "", *, runtime: Runtime | None = None
) -> Incident:
    """A person closes the breaker: the incident ends and its pause is resumed, the parked
    operations woken spread by the provider's rate."""
    rt = runtime or current()
    author = as_author(by, "closed_by")
    incident = _active(rt, provider)
    if not _close(rt, incident, author.actor, note.strip() or None):
        raise RefusedInputError(f"provider: the breaker of {provider!r} is not open")
    with snapshot(rt.settings.database_url) as session:
        done = breaker_store.get(session, incident.incident_id)
    assert done is not None
    return done
