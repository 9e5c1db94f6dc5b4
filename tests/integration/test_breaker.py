"""The provider breaker's shell (issue 39) against the real database and Redis.

Status answers are counted in Redis per provider; the answer that crosses the threshold
opens the breaker once (one pause by ``rule:breaker`` with the evidence, one incident, one
notification per tenant held), and every failing answer from then on spends no budget.
The sweeper's probe claims exactly one operation, however many ask; the probe's success
closes the incident and resumes the rest, its failure re-arms the cool-down. A person's
pause is told once per tenant, never once per operation it parks.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from jobwarden.models.actions import (
    Decided,
    DelaySource,
    Move,
    ProviderRequest,
    RequestPurpose,
    Wait,
)
from jobwarden.models.contracts.contract import Breaker
from jobwarden.models.humans.identity import token_author
from jobwarden.models.persistence import breaker_store, store
from jobwarden.models.persistence.breaker_tables import BreakerIncidentRow
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.notification_tables import NotificationRow
from jobwarden.models.persistence.pause_tables import PauseRow
from jobwarden.models.provider.signals import HttpObservation, RawResponse
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.humans import breakers, pauses
from jobwarden.tasks.provider import breaker
from jobwarden.tasks.runtime import Runtime, current
from tests.integration.api_helpers import insert_operation, load, tenant_name

POLICY = Breaker(window_seconds=30, minimum_count=6, cooldown_seconds=0.1)
STATUS = ProviderRequest(purpose=RequestPurpose.status, method="GET", url="http://x/v1/jobs/j")
WAIT = Decided(
    action=Wait(
        until=datetime.now(UTC) + timedelta(seconds=1),
        delay_seconds=1,
        delay_source=DelaySource.local_backoff,
        clipped_to_deadline=False,
    ),
    changes={"transport_failures_used": 1},
)


def _answer(code: int) -> RawResponse:
    obs = HttpObservation(
        status_code=code,
        headers={},
        body={"error": {"code": "down"}},
        body_problem=None,
        transport_failure=None,
    )
    return RawResponse(observation=obs, content=b"", content_type=None, provider_request_id=None)


@pytest.fixture
def provider() -> Any:
    """A provider of its own with a breaker (a copy of the sandbox contract), removed after."""
    rt = current()
    name = f"brk_{uuid.uuid4().hex[:8]}"
    contract = replace(rt.contract("sandbox"), name=name, breaker=POLICY)
    rt.contracts[name] = contract
    rt.contexts[name] = replace(rt.context("sandbox"), contract=contract)
    yield name
    rt.contracts.pop(name, None)
    rt.contexts.pop(name, None)


def _incidents(url: str, provider: str) -> list[Any]:
    with transaction(url) as session:
        return list(
            session.scalars(
                select(BreakerIncidentRow).where(BreakerIncidentRow.provider == provider)
            )
        )


def _notices(url: str, **where: Any) -> list[Any]:
    with transaction(url) as session:
        query = select(NotificationRow)
        for column, value in where.items():
            query = query.where(getattr(NotificationRow, column) == value)
        return list(session.scalars(query))


def _observe(rt: Runtime, provider: str, op: uuid.UUID, code: int) -> Decided:
    return breaker.observe(rt, rt.contracts[provider], load_op(rt, op), STATUS, _answer(code), WAIT)


def load_op(rt: Runtime, op: uuid.UUID) -> Any:
    with transaction(rt.settings.database_url) as session:
        found = store.load(session, op)
    assert found is not None
    return found


def test_the_answer_that_crosses_the_threshold_opens_the_breaker_once(
    database_url: str, provider: str
) -> None:
    rt = current()
    tenants = [tenant_name(), tenant_name()]
    ops = [insert_operation(database_url, t, S.observing, provider=provider) for t in tenants * 4]
    decided = [_observe(rt, provider, ops[0], 200)]  # a success counts in the window
    decided += [_observe(rt, provider, op, 503) for op in ops[:5]]
    # Six answers, five of them 5xx: at the minimum count and over the share, it opens.
    (incident,) = _incidents(database_url, provider)
    assert incident.state == "open" and incident.reason == "provider_failure"
    assert incident.evidence["counts"] == {
        "answers": 6,
        "server_error": 5,
        "transport": 0,
        "unknown_state": 0,
        "denied": 0,
        "rate_limited": 0,
    }
    assert incident.evidence["first_failing_operation"] == str(ops[0])
    assert incident.evidence["last_failing_operation"] == str(ops[4])
    assert all(str(op) in s for op, s in zip(ops[4::-1], incident.evidence["samples"], strict=True))
    # Below the threshold answers are decided as the step decided them; from the one that
    # opened it on, a failure is the incident's: no budget spent, nothing escalated.
    assert [d is WAIT for d in decided] == [True] * 5 + [False]
    later = [_observe(rt, provider, op, 503) for op in ops[5:]]
    assert all(isinstance(d.action, Move) for d in later)
    assert all("transport_failures_used" not in d.changes for d in [decided[-1], *later])
    assert len(_incidents(database_url, provider)) == 1
    with transaction(database_url) as session:
        (pause,) = session.scalars(select(PauseRow).where(PauseRow.provider == provider))
    assert pause.author == "rule:breaker" and pause.evidence == incident.evidence
    # One notification per tenant held (two channel rows each), keyed by the pause.
    notices = _notices(database_url, kind="provider.paused")
    mine = [n for n in notices if n.payload["data"]["pause_id"] == str(pause.pause_id)]
    assert sorted({n.tenant for n in mine}) == sorted(tenants) and len(mine) == 4
    # Parking everything it covers (the breaker_park task, run here in-process).
    assert breakers.park_all(rt, provider) == len(ops)
    assert all(load(database_url, op).held_by == pause.pause_id for op in ops)
    breakers.close(provider, token_author("ops"), runtime=rt)


def test_exactly_one_probe_is_claimed_and_its_success_resumes_the_rest(
    database_url: str, provider: str
) -> None:
    rt = current()
    ops = [insert_operation(database_url, tenant_name(), S.observing, provider=provider)]
    ops += [insert_operation(database_url, tenant_name(), S.observing, provider=provider)]
    for _ in range(POLICY.minimum_count):
        _observe(rt, provider, ops[0], 503)
    breakers.park_all(rt, provider)
    (incident,) = _incidents(database_url, provider)
    with transaction(database_url) as session:
        session.execute(
            update(BreakerIncidentRow)
            .where(BreakerIncidentRow.incident_id == incident.incident_id)
            .values(probe_due_at=datetime.now(UTC) - timedelta(seconds=1))
        )
        found = breaker_store.get(session, incident.incident_id)
    assert found is not None
    # Several sweepers at once: one claim wins.
    now = datetime.now(UTC)
    with transaction(database_url) as session:
        wins = [
            breaker_store.start_probe(session, found, ops[0], now=now, stale_before=now)
            for _ in range(3)
        ]
    assert wins == [True, False, False]
    probe = load(database_url, ops[0])
    assert probe.hold is not None and probe.hold.probe == ops[0]
    assert load(database_url, ops[1]).hold.probe == ops[0]  # type: ignore[union-attr]
    # A failed probe re-arms the cool-down and parks the probe again, uncounted.
    failed = _observe(rt, provider, ops[0], 503)
    assert isinstance(failed.action, Move) and failed.action.wake_at is None
    assert breakers.probed(rt, provider, ops[0], False) == "reopened"
    (again,) = _incidents(database_url, provider)
    assert again.state == "open" and again.probe_operation_id is None
    assert load(database_url, ops[0]).hold.probe is None  # type: ignore[union-attr]
    # The next probe's success closes the incident and wakes what the pause parked.
    with transaction(database_url) as session:
        assert breaker_store.start_probe(
            session, found, ops[1], now=now + timedelta(hours=1), stale_before=now
        )
    assert _observe(rt, provider, ops[1], 200) is WAIT
    assert breakers.probed(rt, provider, ops[1], True) == "closed"
    (closed,) = _incidents(database_url, provider)
    assert closed.state == "closed" and closed.closed_by == "rule:breaker"
    assert all(load(database_url, op).held_by is None for op in ops)
    assert breakers.probed(rt, provider, ops[1], True) == "not_the_probe"  # a duplicate


def test_a_held_breaker_is_never_probed_until_a_person_closes_it(
    database_url: str, provider: str
) -> None:
    rt = current()
    op = insert_operation(database_url, tenant_name(), S.observing, provider=provider)
    for _ in range(POLICY.minimum_count):
        _observe(rt, provider, op, 503)
    breakers.park_all(rt, provider)
    held = breakers.hold(provider, token_author("alice"), runtime=rt)
    assert held.state.value == "held" and held.held_by == "token:alice"
    with transaction(database_url) as session:
        session.execute(
            update(BreakerIncidentRow)
            .where(BreakerIncidentRow.incident_id == held.incident_id)
            .values(probe_due_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    assert breakers.probe_due(rt) == 0
    done = breakers.close(provider, token_author("bob"), "fixed", runtime=rt)
    assert done.closed_by == "token:bob" and load(database_url, op).held_by is None


def test_a_persons_pause_is_told_once_per_tenant_never_per_operation(database_url: str) -> None:
    tenant = tenant_name()
    for _ in range(3):
        insert_operation(database_url, tenant, S.observing, next_poll_at=None)
    paused = pauses.pause_provider("sandbox", "drill", token_author("alice"), tenant=tenant)
    try:
        again = pauses.pause_provider("sandbox", "again", token_author("bob"), tenant=tenant)
        assert not again.started
        notices = _notices(database_url, tenant=tenant, kind="provider.paused")
        assert {n.event_id for n in notices} == {
            f"paused:{paused.pause.pause_id}:{uuid.uuid5(paused.pause.pause_id, tenant)}"
        }
        assert len(notices) == 2  # one row per channel
        assert notices[0].operation_id is None
        assert notices[0].payload["data"]["paused_by"] == "token:alice"
    finally:
        pauses.resume(str(paused.pause.pause_id), "cleanup")


def test_resuming_the_breakers_pause_itself_ends_the_incident(
    database_url: str, provider: str
) -> None:
    rt = current()
    op = insert_operation(database_url, tenant_name(), S.observing, provider=provider)
    for _ in range(POLICY.minimum_count):
        _observe(rt, provider, op, 503)
    (incident,) = _incidents(database_url, provider)
    pauses.resume(str(incident.pause_id), token_author("alice"))
    with transaction(database_url) as session:
        session.execute(
            update(BreakerIncidentRow)
            .where(BreakerIncidentRow.incident_id == incident.incident_id)
            .values(probe_due_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    assert breakers.probe_due(rt) == 0
    (ended,) = _incidents(database_url, provider)
    assert ended.state == "closed" and ended.closed_by == "token:alice"
