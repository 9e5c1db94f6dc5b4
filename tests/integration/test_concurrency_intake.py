"""Concurrency keys at intake and at the hand-over, against the real Postgres (no workers).

Every test uses a tenant of its own, so a key's holders and queue are only its own.
"""

from __future__ import annotations

import json
import secrets
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from jobwarden.api.app import create_app
from jobwarden.api.auth import Scope, create_token
from jobwarden.models.errors import InvalidSubmissionError
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import concurrency_store, store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState
from jobwarden.tasks.concurrency import admit_stranded
from jobwarden.tasks.humans.interventions import request_cancel
from jobwarden.tasks.intake import (
    SubmitOutcome,
    SubmitResult,
    submit_from_message,
    submit_operation,
)
from jobwarden.tasks.runtime import current
from tests.api_server import serving

COMMAND = {"kind": "export", "behaviour": {"polls_to_finish": 1}}


def _submit(tenant: str, key: str | None, **fields: Any) -> SubmitResult:
    return submit_operation(
        tenant=tenant,
        provider=fields.pop("provider", "sandbox"),
        idempotency_key=fields.pop("idempotency_key", secrets.token_hex(8)),
        command=fields.pop("command", COMMAND),
        requested_by="pytest",
        concurrency_key=key,
        **fields,
    )


def _row(database_url: str, op_id: str | None) -> Operation:
    assert op_id is not None
    with transaction(database_url) as session:
        found = store.load(session, uuid.UUID(op_id))
    assert found is not None
    return found


def _kinds(database_url: str, op_id: str) -> list[str]:
    with transaction(database_url) as session:
        return [e.draft.kind.value for e in store.events_for(session, uuid.UUID(op_id))]


@pytest.fixture
def tenant() -> str:
    return f"cc-{secrets.token_hex(4)}"


def test_a_second_submission_of_a_held_key_is_queued_and_a_keyless_one_is_not(
    database_url: str, tenant: str
) -> None:
    first = _submit(tenant, "deploy:payments:production")
    second = _submit(tenant, "deploy:payments:production")
    other_key = _submit(tenant, "deploy:payments:staging")
    keyless = _submit(tenant, None)
    assert [r.state for r in (first, second, other_key, keyless)] == [
        "create_pending",
        "queued",
        "create_pending",
        "create_pending",
    ]
    assert second.outcome is SubmitOutcome.created
    queued = _row(database_url, second.operation_id)
    # Durable and timerless: the sweeper never wakes it, and it says why it waits.
    assert (queued.concurrency_key, queued.concurrency_limit) == ("deploy:payments:production", 1)
    assert queued.next_poll_at is None and queued.dispatched_at is None
    assert _row(database_url, keyless.operation_id).concurrency_key is None


def test_the_same_key_in_another_tenant_is_another_key(database_url: str, tenant: str) -> None:
    assert _submit(tenant, "deploy:x").state == "create_pending"
    assert _submit(f"{tenant}-b", "deploy:x").state == "create_pending"


def test_concurrent_submissions_of_a_free_lock_start_exactly_one(
    database_url: str, tenant: str
) -> None:
    barrier = threading.Barrier(8)
    states: list[str | None] = []

    def submit() -> None:
        barrier.wait(timeout=10)
        states.append(_submit(tenant, "deploy:race").state)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(s or "" for s in states) == ["create_pending"] + ["queued"] * 7


def test_a_holder_cancelled_before_its_create_hands_the_key_to_the_oldest_queued(
    database_url: str, tenant: str
) -> None:
    holder, oldest, younger = (_submit(tenant, "deploy:h") for _ in range(3))
    assert holder.operation_id and oldest.operation_id and younger.operation_id
    assert request_cancel(holder.operation_id, "alice", "wrong commit") == "abandoned"
    assert _row(database_url, oldest.operation_id).state == "create_pending"
    assert _row(database_url, younger.operation_id).state == "queued"
    assert _kinds(database_url, oldest.operation_id) == ["intent_recorded", "admitted"]
    assert _kinds(database_url, holder.operation_id)[-1] == "key_handed_over"
    with transaction(database_url) as session:
        for op in (holder, oldest, younger):
            assert op.operation_id is not None
            assert store.verify(session, uuid.UUID(op.operation_id)) == []


def test_a_queued_operation_cancelled_leaves_the_queue_in_order(
    database_url: str, tenant: str
) -> None:
    holder, cancelled, last = (_submit(tenant, "deploy:q") for _ in range(3))
    assert cancelled.operation_id and holder.operation_id and last.operation_id
    assert request_cancel(cancelled.operation_id, "alice", "superseded") == "abandoned"
    assert _row(database_url, last.operation_id).state == "queued"  # the holder still holds
    request_cancel(holder.operation_id, "alice", "done")
    assert _row(database_url, last.operation_id).state == "create_pending"


def test_the_sweepers_pass_admits_a_queue_whose_hand_over_never_ran(
    database_url: str, tenant: str
) -> None:
    holder, waiting = _submit(tenant, "deploy:s"), _submit(tenant, "deploy:s")
    assert holder.operation_id and waiting.operation_id
    with transaction(database_url) as session:  # a held key is not stranded
        assert (tenant, "deploy:s") not in concurrency_store.stranded_keys(session, limit=1000)
    # The holder ends by a write that runs no hand-over (as a process dying right after).
    row = _row(database_url, holder.operation_id)
    from jobwarden.models.history.chain import EventDraft, EventKind

    ended = EventDraft(
        kind=EventKind.cancel_requested,
        actor="user:test",
        at=row.updated_at,
        from_state=row.state.value,
        to_state="abandoned",
        cause="test",
    )
    with transaction(database_url) as session:
        store.fenced_update(
            session,
            row,
            changes={"state": OperationState.abandoned},
            drafts=[ended],
            now=row.updated_at,
        )
        assert concurrency_store.stranded_keys(session, limit=1000).count((tenant, "deploy:s")) == 1
    assert _row(database_url, waiting.operation_id).state == "queued"
    assert admit_stranded(current()) >= 1
    assert _row(database_url, waiting.operation_id).state == "create_pending"
    with transaction(database_url) as session:
        assert (tenant, "deploy:s") not in concurrency_store.stranded_keys(session, limit=1000)


def test_a_changed_concurrency_key_under_the_same_idempotency_key_is_a_conflict(
    tenant: str,
) -> None:
    key = secrets.token_hex(8)
    first = _submit(tenant, "deploy:a", idempotency_key=key)
    assert _submit(tenant, "deploy:a", idempotency_key=key).outcome is SubmitOutcome.replayed
    again = _submit(tenant, "deploy:b", idempotency_key=key)
    assert again.outcome is SubmitOutcome.conflict
    assert again.operation_id == first.operation_id
    assert _submit(tenant, None, idempotency_key=key).outcome is SubmitOutcome.conflict


@pytest.mark.parametrize("bad", ["has space", "", "x" * 201, 5])
def test_a_bad_concurrency_key_is_refused_naming_the_field_at_every_door(
    tenant: str, bad: object
) -> None:
    with pytest.raises(InvalidSubmissionError, match="concurrency_key"):
        _submit(tenant, bad)  # type: ignore[arg-type]  # hostile input on purpose
    answer = submit_from_message(
        {
            "tenant": tenant,
            "provider": "sandbox",
            "idempotency_key": secrets.token_hex(8),
            "command": COMMAND,
            "requested_by": "pytest",
            "concurrency_key": bad,
        }
    )
    assert answer["outcome"] == "invalid" and "concurrency_key" in answer["error"]


@pytest.fixture(scope="module")
def api(database_url: str) -> Iterator[str]:
    with serving(create_app()) as url:
        yield url


def test_the_http_door_takes_a_concurrency_key_and_answers_queued(
    database_url: str, api: str, tenant: str
) -> None:
    bearer = create_token(
        database_url, tenant=tenant, name="deployer", scopes=(Scope.submit, Scope.read)
    ).token

    def post(body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{api}/v1/operations",
            json=body,
            headers={"Authorization": f"Bearer {bearer}", "Idempotency-Key": secrets.token_hex(8)},
            timeout=30,
        )

    body = {"provider": "sandbox", "command": COMMAND, "concurrency_key": "deploy:web"}
    first, second = post(body), post(body)
    assert (first.status_code, first.json()["state"]) == (201, "create_pending")
    assert (second.status_code, second.json()["state"]) == (201, "queued")
    refused = post({**body, "concurrency_key": "no spaces please"})
    assert refused.status_code == 422
    assert "concurrency_key" in refused.text


def test_a_contract_demanding_approval_queues_unapproved_and_admits_to_approval(
    database_url: str, tenant: str
) -> None:
    from jobwarden.tasks.humans.interventions import approve

    def batch() -> SubmitResult:
        return _submit(tenant, "batch:nightly", provider="openai_batch", command={"n": 1})

    waiting_for_a_human, queued = batch(), batch()
    # A submission awaiting approval already holds the key; the one behind it has no
    # approver yet, which the database allows only before approval or in the queue.
    assert (waiting_for_a_human.state, queued.state) == ("awaiting_approval", "queued")
    assert _row(database_url, queued.operation_id).authorized_by is None
    assert waiting_for_a_human.operation_id is not None and queued.operation_id is not None
    request_cancel(waiting_for_a_human.operation_id, "alice", "not tonight")
    admitted = _row(database_url, queued.operation_id)
    assert admitted.state == "awaiting_approval" and admitted.dispatched_at is None
    # Parked until its approval window (a day, openai_batch's) ends, counted from admission.
    assert admitted.next_poll_at == admitted.updated_at + timedelta(days=1)
    assert approve(queued.operation_id, admitted.request_fingerprint, "bob") == "create_pending"


def test_the_cli_takes_a_concurrency_key_as_a_flag_and_from_the_environment(
    database_url: str, tenant: str
) -> None:
    from tests.integration.test_cli import _cli

    def submit(*flags: str, env: dict[str, str] | None = None) -> Any:
        key = secrets.token_hex(8)
        args = ("submit", "sandbox", '{"kind": "export"}', "--key", key, "--tenant", tenant)
        return _cli(*args, *flags, env=env)

    first = submit("--concurrency-key", "deploy:cli")
    second = submit(env={"JOBWARDEN_CONCURRENCY_KEY": "deploy:cli"})
    assert first.returncode == 0 == second.returncode, (first.stderr, second.stderr)
    assert json.loads(first.stdout)["state"] == "create_pending"
    assert json.loads(second.stdout)["state"] == "queued"
    refused = submit("--concurrency-key", "two words")
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "concurrency_key" in refused.stderr
