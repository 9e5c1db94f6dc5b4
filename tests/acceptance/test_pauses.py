"""Pause and resume by a person, through real workers and the sandbox (issue 39).

Operations poll a provider; a person pauses it: from the moment the pause returns, the
sandbox's own request log shows no request for them (a witness operation at another
provider keeps polling, so the workers are busy and time passes), their counters do not
move, a worker killed meanwhile loses nothing, and their histories name who paused. A
cancel asked for while paused is recorded at once and reaches the sandbox only after
the resume. The resume spreads the restart: the sandbox sees their requests no faster
than the provider's rate limit, and every one of them succeeds.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from jobwarden.demo.harness import Stack, wait_for
from jobwarden.demo.sandbox.server import SandboxServer
from jobwarden.models.humans.identity import token_author
from jobwarden.tasks.dispatch import enqueue
from jobwarden.tasks.humans import interventions, pauses
from jobwarden.tasks.runtime import current
from tests.acceptance.conftest import Pipeline, limiter_grants, max_in_one_second
from tests.acceptance.test_postgres_restart import _accepting
from tests.private_servers import machine_servers_untouched, private_run

pytestmark = pytest.mark.usefixtures("stack")

PROVIDER = "sandbox_pausable"
RATE, BURST = 4, 1  # its [rate_limit] (tests/acceptance/conftest.py)
OPERATIONS = 8
ALICE, BOB = token_author("alice"), token_author("bob")


def _requests_since(pipeline: Pipeline, job_ids: set[str], since: float) -> list[dict[str, Any]]:
    return [
        r for r in pipeline.sandbox.requests() if r["job_id"] in job_ids and r["monotonic"] >= since
    ]


def test_a_person_pauses_a_provider_nothing_reaches_it_and_the_resume_is_spread(
    pipeline: Pipeline, stack: Stack
) -> None:
    ops = [
        pipeline.submit({"seconds_to_finish": 30.0}, provider=PROVIDER) for _ in range(OPERATIONS)
    ]
    doomed = pipeline.submit({"seconds_to_finish": 600.0}, provider=PROVIDER)
    wait_for(
        lambda: all(pipeline.row(op).state.value == "observing" for op in [*ops, doomed]),
        timeout=60,
        what="every operation to be observing",
    )
    witness = pipeline.submit({"polls_to_finish": 40})
    pipeline.wait_state(witness, "observing")

    paused = pauses.pause_provider(PROVIDER, "provider incident drill", ALICE)
    since = time.monotonic()
    assert paused.started and paused.parked >= 1
    jobs = {pipeline.row(op).remote_job_id for op in [*ops, doomed]}
    counters = {op: pipeline.row(op).status_requests_used for op in [*ops, doomed]}

    # A cancel while paused is recorded at once; a duplicated wake-up changes nothing.
    assert interventions.request_cancel(doomed, BOB, "stop it") == "cancel_requested"
    rt = current()
    for op in ops:
        enqueue(rt, pipeline.row(op).operation_id, pipeline.row(op).state)
    # A worker killed during the pause loses nothing.
    stack.kill_worker("w1")
    stack.start_worker("w1")
    stack.wait_ready("w1")
    # The workers stay busy meanwhile: the witness, at another provider, keeps polling.
    witness_job = pipeline.row(witness).remote_job_id
    wait_for(
        lambda: len(_requests_since(pipeline, {witness_job}, since)) >= 4,
        timeout=60,
        what="the witness to poll four times during the pause",
    )
    wait_for(
        lambda: "paused" in pipeline.kinds(doomed)[-1:],
        timeout=30,
        what="the cancel to be parked",
    )

    assert _requests_since(pipeline, jobs, since) == []
    by_alice = 0
    for op in [*ops, doomed]:
        row = pipeline.row(op)
        assert row.status_requests_used == counters[op]  # nothing spent while paused
        paused_events = [e.draft for e in pipeline.events(op) if e.draft.kind.value == "paused"]
        # Parked by the pause as alice's act, or by its own step (woken as the pause
        # landed, before the pause reached it): either way the history names her.
        assert paused_events and all(e.excerpt["paused_by"] == "token:alice" for e in paused_events)
        by_alice += paused_events[0].actor == "human:token:alice"
    assert by_alice == paused.parked
    assert "cancel_sent" not in pipeline.kinds(doomed)

    resumed_at, resumed_wall = time.monotonic(), datetime.now(UTC)
    done = pauses.resume(str(paused.pause.pause_id), BOB, "provider fixed")
    assert done.woken == OPERATIONS + 1
    for op in ops:
        pipeline.wait_state(op, "succeeded", timeout=120)
    pipeline.wait_state(doomed, {"cancelled", "succeeded"}, timeout=60)
    after = _requests_since(pipeline, jobs, resumed_at)
    assert any(r["kind"] == "cancel" for r in after)  # sent only after the resume
    # No burst: the limiter granted them no faster than the rate limit (plus its burst),
    # exactly. The sandbox stamps arrivals, which a loaded machine shifts (a request granted
    # at the end of one second may arrive in the next): two more than the limit, no burst,
    # as in test_breaker.py.
    granted = limiter_grants(
        pipeline.database_url,
        [pipeline.row(op).operation_id for op in [*ops, doomed]],
        since=resumed_wall,
    )
    assert len(granted) >= OPERATIONS
    assert max_in_one_second(granted) <= RATE + BURST
    assert max_in_one_second([r["monotonic"] for r in after]) <= RATE + BURST + 2
    for op in [*ops, doomed]:
        resumed = [e.draft for e in pipeline.events(op) if e.draft.kind.value == "resumed"]
        assert resumed and resumed[0].actor == "human:token:bob"


def test_a_cancel_a_person_lets_go_during_the_pause_reaches_the_provider_during_it(
    pipeline: Pipeline,
) -> None:
    op = pipeline.submit({"seconds_to_finish": 600.0}, provider=PROVIDER)
    pipeline.wait_state(op, "observing")
    paused = pauses.pause_operation(op, "suspicious job", ALICE)
    try:
        interventions.request_cancel(op, BOB, "stop the damage", send_during_pause=True)
        # The step claims the cancel (the state becomes cancelling) before it sends it: the
        # state alone does not say the request left, the sandbox's log does.
        wait_for(
            lambda: pipeline.job_requests(op, "cancel"),
            timeout=30,
            what="the cancel at the provider during the pause",
        )
        assert pipeline.row(op).state.value in {"cancelling", "cancelled"}
        assert pipeline.row(op).cancel_during_pause_by == "token:bob"
    finally:
        pauses.resume(str(paused.pause.pause_id), BOB)
    pipeline.wait_state(op, "cancelled", timeout=60)


def test_a_postgres_restart_in_the_middle_of_a_pause_loses_nothing(
    worker_env: dict[str, str], sandbox: SandboxServer, database_url: str
) -> None:
    """On private servers (tests/private_servers.py): the pause, the parked operations and
    their histories survive the restart; nothing is sent until the resume, then all end."""
    with private_run(worker_env) as private:
        pipeline = Pipeline(sandbox, private.database_url)
        ops = [pipeline.submit({"seconds_to_finish": 20.0}, provider=PROVIDER) for _ in range(4)]
        wait_for(
            lambda: all(pipeline.row(op).state.value == "observing" for op in ops),
            timeout=60,
            what="every operation to be observing",
        )
        paused = pauses.pause_provider(PROVIDER, "restart drill", ALICE)
        since = time.monotonic()
        jobs = {pipeline.row(op).remote_job_id for op in ops}
        with machine_servers_untouched(database_url, os.environ["JOBWARDEN_TEST_REDIS_URL"]):
            private.postgres.restart()
            wait_for(lambda: _accepting(private.database_url), timeout=30, what="Postgres again")
            # The pause is still in force after the restart, and still held them back.
            assert [p.pause_id for p in pauses.pauses()] == [paused.pause.pause_id]
            assert _requests_since(pipeline, jobs, since) == []
            assert all(pipeline.row(op).held_by == paused.pause.pause_id for op in ops)
            assert pauses.resume(str(paused.pause.pause_id), BOB).woken == len(ops)
            for op in ops:
                pipeline.wait_state(op, "succeeded", timeout=90)
        pipeline.verify_all()
