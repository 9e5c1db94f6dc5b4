"""Pause and resume (issue 39) against the real database and Redis, steps run in-process.

A pause parks what it covers at once (a ``paused`` event naming who, no counter spent);
a step woken while paused sends nothing; a deadline that passes while paused is handled
with no request; a cancel is recorded at once and sent on resume, or during the pause
when the person says so; a resume wakes each parked operation spread by the rate.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.identity import token_author
from jobwarden.models.humans.pauses import DEFAULT_RESUME_RATE, Rule
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.plan import Plan
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import CANCEL, POLL
from jobwarden.tasks.humans import interventions, pauses
from jobwarden.tasks.pipeline import run_step
from jobwarden.tasks.runtime import current
from tests.integration.api_helpers import insert_operation, load, tenant_name

ALICE = token_author("alice")
BOB = token_author("bob")


def _kinds(url: str, op: uuid.UUID) -> list[str]:
    with transaction(url) as session:
        return [e.draft.kind.value for e in store.events_for(session, op)]


def _events(url: str, op: uuid.UUID, kind: EventKind) -> list[Any]:
    with transaction(url) as session:
        return [e.draft for e in store.events_for(session, op) if e.draft.kind is kind]


def _polling(url: str, tenant: str, **overrides: Any) -> uuid.UUID:
    """An observing operation at a usable status URL, due now."""
    base = current().contract("sandbox").base_url.rstrip("/")
    values: dict[str, Any] = {
        "status_url": f"{base}/v1/jobs/paused-{uuid.uuid4().hex[:8]}",
        "next_poll_at": datetime.now(UTC),
        "status_requests_used": 2,
    }
    return insert_operation(url, tenant, S.observing, **(values | overrides))


@pytest.fixture
def provider_pause() -> Any:
    """Pauses started by a test are resumed after it, so other tests' operations at the
    sandbox provider are not held (each test pauses one tenant's share)."""
    started: list[str] = []
    yield started
    for pause_id in started:
        pauses.resume(pause_id, "cleanup")


def test_a_tenants_pause_parks_its_operations_at_once_and_only_its_own(
    database_url: str, provider_pause: list[str]
) -> None:
    tenant, other = tenant_name(), tenant_name()
    mine = [_polling(database_url, tenant) for _ in range(3)]
    theirs = _polling(database_url, other)
    before = {op: load(database_url, op) for op in mine}
    paused = pauses.pause_provider("sandbox", "provider incident 42", ALICE, tenant=tenant)
    provider_pause.append(str(paused.pause.pause_id))
    assert paused.started and paused.parked == 3
    for op in mine:
        row = load(database_url, op)
        assert row.held_by == paused.pause.pause_id and row.hold is not None
        # Counters untouched; the timer is the deadline, which keeps running.
        assert row.status_requests_used == before[op].status_requests_used
        assert row.next_poll_at == row.result_deadline
        (event,) = _events(database_url, op, EventKind.paused)
        assert event.actor == "human:token:alice" and "provider incident 42" in event.cause
    assert load(database_url, theirs).hold is None and load(database_url, theirs).held_by is None
    # Pausing the same scope again finds the pause that holds it, unchanged.
    again = pauses.pause_provider("sandbox", "another reason", BOB, tenant=tenant)
    assert not again.started and again.pause.pause_id == paused.pause.pause_id
    assert again.pause.reason == "provider incident 42" and again.parked == 0


def test_a_person_pausing_may_extend_each_operation_once(
    database_url: str, provider_pause: list[str]
) -> None:
    tenant = tenant_name()
    op = _polling(database_url, tenant)
    before = load(database_url, op)
    paused = pauses.pause_provider("sandbox", "incident", ALICE, tenant=tenant, extend=True)
    provider_pause.append(str(paused.pause.pause_id))
    row = load(database_url, op)
    assert row.held_by == paused.pause.pause_id
    assert before.result_deadline is not None and row.result_deadline is not None
    assert row.result_deadline >= before.result_deadline + timedelta(minutes=15)
    assert row.max_status_requests == before.max_status_requests + 4
    assert row.extensions_used == before.extensions_used + 1
    assert row.business_deadline == before.business_deadline  # the business's own
    assert row.next_poll_at == row.result_deadline  # the timer is the extended deadline
    (event,) = _events(database_url, op, EventKind.paused)
    assert event.actor == "human:token:alice" and "new_bounds" in event.excerpt
    # The option is used: the resume's extend adds nothing more.
    pauses.resume(str(paused.pause.pause_id), BOB, extend=True)
    after = load(database_url, op)
    assert (after.result_deadline, after.extensions_used) == (
        row.result_deadline,
        row.extensions_used,
    )


def test_a_step_woken_while_paused_sends_nothing_and_counts_nothing(
    database_url: str, provider_pause: list[str]
) -> None:
    tenant = tenant_name()
    op = _polling(database_url, tenant)
    paused = pauses.pause_provider("sandbox", "incident", ALICE, tenant=tenant)
    provider_pause.append(str(paused.pause.pause_id))
    # A wake-up message that was already on its way (or a sweeper's) when the pause landed.
    with transaction(database_url) as session:
        row = store.load(session, op)
        assert row is not None
        store.write(
            session,
            row,
            Plan(changes={"next_poll_at": datetime.now(UTC) - timedelta(seconds=1)}),
            now=datetime.now(UTC),
        )
    used = load(database_url, op).status_requests_used
    assert run_step(str(op), POLL) == S.observing.value
    kinds = _kinds(database_url, op)
    assert "poll_sent" not in kinds and kinds[-1] == "paused"
    assert load(database_url, op).status_requests_used == used
    # Woken again before its timer: nothing written at all.
    count = load(database_url, op).event_count
    run_step(str(op), POLL)
    assert load(database_url, op).event_count == count


def test_a_deadline_passing_while_paused_is_handled_without_a_request(
    database_url: str, provider_pause: list[str]
) -> None:
    tenant = tenant_name()
    soon = datetime.now(UTC) + timedelta(seconds=2)
    op = _polling(database_url, tenant, result_deadline=soon)
    paused = pauses.pause_provider("sandbox", "incident", ALICE, tenant=tenant)
    provider_pause.append(str(paused.pause.pause_id))
    assert load(database_url, op).next_poll_at == soon
    with transaction(database_url) as session:
        row = store.load(session, op)
        assert row is not None
        # The deadline has passed (moved, rather than slept through).
        store.write(
            session,
            row,
            Plan(changes={"result_deadline": datetime.now(UTC) - timedelta(seconds=1)}),
            now=datetime.now(UTC),
        )
    assert run_step(str(op), POLL) == S.result_timed_out.value
    assert "poll_sent" not in _kinds(database_url, op)


def test_a_cancel_while_paused_is_recorded_at_once_and_sent_on_resume(
    database_url: str, provider_pause: list[str]
) -> None:
    tenant = tenant_name()
    op = _polling(database_url, tenant, next_poll_at=None)
    paused = pauses.pause_provider("sandbox", "incident", ALICE, tenant=tenant)
    assert interventions.request_cancel(str(op), BOB, "stop it") == S.cancel_requested.value
    run_step(str(op), CANCEL)
    kinds = _kinds(database_url, op)
    assert "cancel_sent" not in kinds and kinds[-2:] == ["cancel_requested", "paused"]
    woken = pauses.resume(str(paused.pause.pause_id), BOB)
    assert woken.woken == 1
    row = load(database_url, op)
    assert row.held_by is None and row.hold is None and row.next_poll_at is not None
    assert _kinds(database_url, op)[-1] == "resumed"


def test_a_cancel_a_person_lets_go_during_the_pause_is_sent_during_it(
    database_url: str, provider_pause: list[str]
) -> None:
    tenant = tenant_name()
    op = _polling(database_url, tenant, next_poll_at=None)
    paused = pauses.pause_provider("sandbox", "incident", ALICE, tenant=tenant)
    provider_pause.append(str(paused.pause.pause_id))
    interventions.request_cancel(str(op), BOB, "stop the damage", send_during_pause=True)
    assert load(database_url, op).cancel_during_pause_by == "token:bob"
    run_step(str(op), CANCEL)
    assert "cancel_sent" in _kinds(database_url, op)


def test_a_resume_spreads_the_wake_ups_by_the_providers_rate(
    database_url: str, provider_pause: list[str]
) -> None:
    tenant = tenant_name()
    ops = [_polling(database_url, tenant) for _ in range(6)]
    paused = pauses.pause_provider("sandbox", "incident", ALICE, tenant=tenant)
    done = pauses.resume(str(paused.pause.pause_id), BOB, "provider fixed")
    assert done.woken == 6 and done.pause.resumed_by == "token:bob"
    times = sorted(t for op in ops if (t := load(database_url, op).next_poll_at) is not None)
    assert len(times) == len(ops)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    # The sandbox sets no [rate_limit]: the default rate spaces them, jitter within one slot.
    assert min(gaps) > 0 and max(gaps) < 2 / DEFAULT_RESUME_RATE
    for op in ops:
        (event,) = _events(database_url, op, EventKind.resumed)
        assert event.actor == "human:token:bob"
        row = load(database_url, op)
        assert row.dispatched_at is None  # the sweeper relays it: no message each at once
    # Resuming again wakes what is left parked (nothing), and refuses nothing.
    assert pauses.resume(str(paused.pause.pause_id), BOB).woken == 0


def test_one_operation_can_be_paused_by_itself_and_a_rule_can_pause_with_evidence(
    database_url: str, provider_pause: list[str]
) -> None:
    tenant = tenant_name()
    one, other = _polling(database_url, tenant), _polling(database_url, tenant)
    paused = pauses.pause_operation(str(one), "looks wrong", ALICE, tenant=tenant)
    provider_pause.append(str(paused.pause.pause_id))
    assert paused.parked == 1 and load(database_url, other).hold is None
    with pytest.raises(RefusedInputError, match="no operation"):
        pauses.pause_operation(str(one), "not mine", ALICE, tenant=tenant_name())
    rule = pauses.pause_provider(
        "sandbox",
        "provider_failure",
        Rule(name="breaker"),
        tenant=tenant,
        evidence={"failures": 12, "window_seconds": 60},
    )
    provider_pause.append(str(rule.pause.pause_id))
    assert rule.pause.author == "rule:breaker" and rule.pause.author_kind == "rule"
    assert rule.pause.evidence == {"failures": 12, "window_seconds": 60}
    (event,) = _events(database_url, other, EventKind.paused)
    assert event.actor == "rule:breaker"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: pauses.pause_provider("nope", "r", ALICE, tenant="t"), "provider"),
        (lambda: pauses.pause_provider("sandbox", " ", ALICE, tenant="t"), "reason"),
        (lambda: pauses.pause_operation("not-a-uuid", "r", ALICE), "operation"),
        (lambda: pauses.resume("not-a-uuid", ALICE), "pause"),
        (lambda: pauses.resume(str(uuid.uuid4()), ALICE), "no pause"),
    ],
)
def test_a_pause_refuses_bad_input_naming_the_field(call: Any, field: str) -> None:
    with pytest.raises(RefusedInputError, match=field):
        call()


def test_the_paused_operations_gauge_counts_what_a_pause_parked(
    database_url: str, provider_pause: list[str]
) -> None:
    from jobwarden.observability.metrics import collect_families, pause_figures

    def parked() -> float:
        (family,) = collect_families(database_url, datetime.now(UTC), figures=(pause_figures,))
        return sum(s.value for s in family.samples if s.labels.get("provider") == "sandbox")

    before = parked()
    tenant = tenant_name()
    for _ in range(2):
        _polling(database_url, tenant)
    paused = pauses.pause_provider("sandbox", "incident", ALICE, tenant=tenant)
    assert parked() == before + 2
    pauses.resume(str(paused.pause.pause_id), BOB)
    assert parked() == before
