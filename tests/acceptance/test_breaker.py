"""The provider breaker through real workers and the sandbox (issue 39).

A thousand operations at a provider whose every status read fails (a scripted outage of
503s): the breaker opens on the window's answers as one pause by ``rule:breaker`` and one
incident, parks them all, and no operation escalates on its own or spends its budget of
six transport failures (which each would exhaust alone). The provider sees no more 503s
than the breaker's minimum count, the requests in flight when it tripped and its probes;
failing probes re-arm the cool-down. When the outage ends, one half-open probe succeeds
and the resume wakes the rest, spread by the rate limit: the sandbox's own log shows no
second with more requests than the limit allows, and every operation succeeds.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import func, select

from jobwarden.demo.harness import wait_for, wait_for_progress
from jobwarden.demo.sandbox.server import SandboxServer
from jobwarden.models.persistence import breaker_store
from jobwarden.models.persistence.breaker_tables import BreakerIncidentRow
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.pause_tables import PauseRow
from jobwarden.models.persistence.tables import EventRow, OperationRow, TimerRow
from tests.acceptance.conftest import Pipeline, limiter_grants, max_in_one_second
from tests.acceptance.test_postgres_restart import _accepting
from tests.private_servers import machine_servers_untouched, private_run

PROVIDER = "sandbox_breaker"
RATE, BURST = 40, 1  # its [rate_limit] (tests/acceptance/conftest.py)
MINIMUM_COUNT = 20  # its [breaker]
MAX_TRANSPORT_FAILURES = 6  # its [limits]
OPERATIONS = 1000
# Steps that may be under way at once (two workers of two processes, test_breaker's
# stack): each may have loaded its snapshot before the pause committed, and send one.
IN_FLIGHT = 4


def _count(database_url: str, query: Any) -> int:
    with transaction(database_url) as session:
        return int(session.scalar(query) or 0)


def _states(database_url: str, mine: Any) -> tuple[int, str]:
    """How many of ``mine`` succeeded, and every state's count (said when the wait fails)."""
    with transaction(database_url) as session:
        rows = session.execute(
            select(OperationRow.state, func.count()).where(mine).group_by(OperationRow.state)
        ).all()
    counts = {str(state): int(n) for state, n in rows}
    return counts.get("succeeded", 0), ", ".join(f"{s} {n}" for s, n in sorted(counts.items()))


def _incident(database_url: str) -> breaker_store.Incident | None:
    with transaction(database_url) as session:
        return breaker_store.active(session, PROVIDER)


@pytest.mark.timeout(720)
@pytest.mark.usefixtures("stack")
def test_an_outage_opens_the_breaker_once_and_a_probe_resumes_everything_without_a_burst(
    pipeline: Pipeline, database_url: str
) -> None:
    tenant = f"breaker-{secrets.token_hex(3)}"
    since = time.monotonic()
    pipeline.sandbox.outage(503)
    try:
        ops = [
            uuid.UUID(pipeline.submit({"polls_to_finish": 1}, provider=PROVIDER, tenant=tenant))
            for _ in range(OPERATIONS)
        ]
        print(f"submitted after {time.monotonic() - since:.1f}s")
        incident = wait_for(
            lambda: _incident(database_url), timeout=60, interval=0.2, what="the breaker open"
        )
        assert incident is not None
        print(f"open after {time.monotonic() - since:.1f}s")
        mine = OperationRow.operation_id.in_(ops)
        wait_for(
            lambda: (
                _count(
                    database_url,
                    select(func.count())
                    .select_from(OperationRow)
                    .where(mine, OperationRow.held_by == incident.pause_id),
                )
                == OPERATIONS
            ),
            timeout=120,
            interval=0.5,
            what="every operation parked by the breaker's pause",
        )
        print(f"parked after {time.monotonic() - since:.1f}s")
        # Half-open while the provider is still down: the probe fails and re-arms.
        wait_for(
            lambda: (found := _incident(database_url)) is not None and found.probes >= 2,
            timeout=60,
            interval=0.2,
            what="a second probe after a failed one",
        )
        during = [
            r for r in pipeline.sandbox.requests() if r["status"] == 503 and r["monotonic"] >= since
        ]
    finally:
        pipeline.sandbox.outage(None)
    recovered = time.monotonic()
    print(f"recovered after {recovered - since:.1f}s")

    # 1,000 operations each need a create, a poll and a collect after the recovery: on a
    # loaded machine (CI runs this beside the rest of the suite) that takes minutes. So the
    # wait fails on a stall (no operation ending for a minute), not on a fixed total.
    wait_for_progress(
        lambda: _states(database_url, mine),
        target=OPERATIONS,
        stall=60,
        timeout=600,
        what="every operation succeeded after the recovery",
    )
    with transaction(database_url) as session:
        incidents = session.execute(
            select(BreakerIncidentRow).where(BreakerIncidentRow.provider == PROVIDER)
        ).all()
        pauses = session.execute(select(PauseRow).where(PauseRow.provider == PROVIDER)).all()
        escalations = session.scalar(
            select(func.count())
            .select_from(EventRow)
            .where(EventRow.operation_id.in_(ops), EventRow.kind == "escalated")
        )
        # The counters live in the hot row (0033).
        spent = session.scalar(
            select(func.max(TimerRow.transport_failures_used)).where(TimerRow.operation_id.in_(ops))
        )
    # Exactly one escalation: one incident, one pause by the rule, closed by its probe.
    assert len(incidents) == 1 and len(pauses) == 1
    row = incidents[0][0]
    assert row.state == "closed" and row.closed_by == "rule:breaker"
    assert pauses[0][0].author == "rule:breaker" and pauses[0][0].resumed_by == "rule:breaker"
    evidence = row.evidence
    # It opened on the answer that reached the minimum count (every one a 503), give or
    # take the answers counted at the same moment by the other steps in flight.
    assert MINIMUM_COUNT <= evidence["counts"]["answers"] <= MINIMUM_COUNT + IN_FLIGHT
    assert evidence["counts"]["server_error"] == evidence["counts"]["answers"]
    assert evidence["first_failing_operation"] and evidence["samples"]
    # No operation escalated on its own, none spent its transport budget.
    assert escalations == 0
    assert spent is not None and spent <= MAX_TRANSPORT_FAILURES
    # At most the threshold's requests reached the provider in the outage: the minimum
    # count, the steps in flight when it tripped, and the probes.
    assert len(during) <= MINIMUM_COUNT + IN_FLIGHT + row.probes, (len(during), row.probes)
    # No burst on recovery. The limiter's grants (each request's event records its grant
    # time) keep the rate exactly; the sandbox's log stamps arrivals, which the network
    # and a loaded machine shift by a few milliseconds, so a request granted at the end of
    # one second may arrive in the next: two more than the limit, no burst.
    after = [r["monotonic"] for r in pipeline.sandbox.requests() if r["monotonic"] >= recovered]
    granted = limiter_grants(database_url, ops, since=row.closed_at)
    with transaction(database_url) as session:
        held = session.execute(
            select(EventRow.kind, func.count())
            .where(
                EventRow.operation_id.in_(ops),
                EventRow.at >= row.closed_at,
                EventRow.delay_source == "local_rate_limit",
            )
            .group_by(EventRow.kind)
        ).all()
    print(f"held by the limiter after the recovery: {dict(held)}")
    print(
        f"{len(during)} failing answers in the outage ({row.probes} probes); "
        f"{len(after)} requests after it, at most {max_in_one_second(after)} arriving and "
        f"{max_in_one_second(granted)} granted in one second"
    )
    assert len(granted) >= OPERATIONS
    assert max_in_one_second(granted) <= RATE + BURST
    assert max_in_one_second(after) <= RATE + BURST + 2


@pytest.mark.timeout(300)
def test_a_worker_kill_and_a_postgres_restart_while_open_lose_nothing(
    worker_env: dict[str, str], sandbox: SandboxServer, database_url: str
) -> None:
    """On private servers (tests/private_servers.py): the incident and its pause live in
    Postgres, so after a worker is killed and Postgres restarts the breaker is still open
    once, its probes go on, and the recovery resumes every operation."""
    with private_run(worker_env) as private:
        pipeline = Pipeline(sandbox, private.database_url)
        sandbox.outage(503)
        try:
            ops = [
                uuid.UUID(pipeline.submit({"polls_to_finish": 1}, provider=PROVIDER))
                for _ in range(40)
            ]
            opened = wait_for(
                lambda: _incident(private.database_url),
                timeout=60,
                interval=0.2,
                what="the breaker open",
            )
            assert opened is not None
            with machine_servers_untouched(database_url, os.environ["JOBWARDEN_TEST_REDIS_URL"]):
                private.stack.kill_worker("private-w1")
                private.postgres.restart()
                wait_for(
                    lambda: _accepting(private.database_url), timeout=30, what="Postgres again"
                )
                private.stack.start_worker("private-w1")
                private.stack.wait_ready("private-w1")
                # Still the one incident, and it still probes (and re-arms: still down).
                wait_for(
                    lambda: (
                        (found := _incident(private.database_url)) is not None
                        and found.probes >= opened.probes + 2
                    ),
                    timeout=60,
                    interval=0.2,
                    what="probes after the restart",
                )
        finally:
            sandbox.outage(None)
        mine = OperationRow.operation_id.in_(ops)
        wait_for(
            lambda: (
                _count(
                    private.database_url,
                    select(func.count())
                    .select_from(OperationRow)
                    .where(mine, OperationRow.state == "succeeded"),
                )
                == len(ops)
            ),
            timeout=120,
            interval=0.5,
            what="every operation succeeded after the recovery",
        )
        with transaction(private.database_url) as session:
            incidents = session.scalars(
                select(BreakerIncidentRow).where(BreakerIncidentRow.provider == PROVIDER)
            ).all()
            escalations = session.scalar(
                select(func.count())
                .select_from(EventRow)
                .where(EventRow.operation_id.in_(ops), EventRow.kind == "escalated")
            )
        assert [(i.incident_id, i.state, i.closed_by) for i in incidents] == [
            (opened.incident_id, "closed", "rule:breaker")
        ]
        assert escalations == 0
        pipeline.verify_all()
