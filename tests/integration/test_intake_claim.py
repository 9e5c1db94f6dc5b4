"""The intake's one-statement insert (models/persistence/intake_store.py) against the real
Postgres: a new key writes the operation, its first event and the ``created`` intake entry,
and the chain verifies with the row's digest; a taken key writes nothing at all; a key
an uncommitted submission holds is the domain error, not a driver's. A replay or a
conflict is answered and logged by that same statement (issue 37); a key committed after
the statement began is read afresh and answered once.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.waiting import Wait
from sqlalchemy import text

from jobwarden.api.intake import HTTP_STATUSES
from jobwarden.config.settings import get_settings
from jobwarden.models.errors import SubmissionInProgressError
from jobwarden.models.intake.submission import SubmissionRequest
from jobwarden.models.persistence import api_store, db, intake_store, store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.intake import (
    Caller,
    SubmitOutcome,
    SubmitResult,
    submit_operation,
    submit_request,
)
from jobwarden.tasks.runtime import Runtime, build_runtime, utcnow
from jobwarden.tasks.runtime import close as close_runtime
from tests.integration.factories import created_entry, insert_opened, opened_in

QUEUE_SUFFIX = "intake-claim"


@pytest.fixture(scope="module")
def runtime(database_url: str) -> Iterator[Runtime]:
    """A runtime publishing wake-ups to a queue of its own, purged afterwards."""
    base = get_settings()
    rt = build_runtime(base.model_copy(update={"queue": f"{base.queue}-{QUEUE_SUFFIX}"}))
    yield rt
    for key in rt.redis.scan_iter(f"{base.key_prefix}:celery:*{QUEUE_SUFFIX}*"):
        rt.redis.delete(key)
    rt.redis.close()
    close_runtime(rt)


def _counts(url: str, tenant: str) -> tuple[int, int, int]:
    with transaction(url) as session:
        row = session.execute(
            text(
                "SELECT (SELECT count(*) FROM operations WHERE tenant = :t), "
                "(SELECT count(*) FROM operation_events e JOIN operations o USING (operation_id) "
                " WHERE o.tenant = :t), "
                "(SELECT count(*) FROM intake_log WHERE tenant = :t)"
            ),
            {"t": tenant},
        ).one()
    return row[0], row[1], row[2]


def test_a_new_key_writes_the_operation_its_first_event_and_its_created_entry_and_verifies(
    database_url: str, runtime: Runtime
) -> None:
    tenant, key = f"claim-{secrets.token_hex(4)}", secrets.token_hex(8)
    result = submit_operation(
        tenant=tenant,
        provider="sandbox",
        idempotency_key=key,
        command={"kind": "export", "note": "a/b~c"},
        requested_by="pytest",
        runtime=runtime,
    )
    assert result.outcome is SubmitOutcome.created and result.operation_id is not None
    op_id = uuid.UUID(result.operation_id)
    assert _counts(database_url, tenant) == (1, 1, 1)
    with transaction(database_url) as session:
        assert store.verify(session, op_id) == []
        row = store.load(session, op_id)
        events = store.events_for(session, op_id)
        (entry,) = api_store.intake_for_key(session, tenant, key)
    assert row is not None and row.command == {"kind": "export", "note": "a/b~c"}
    assert row.last_event_hash == events[-1].hash and row.event_count == 1
    excerpt = events[0].draft.excerpt
    assert excerpt is not None and excerpt["fingerprint"] == result.fingerprint
    assert (entry.outcome, entry.operation_id, entry.state, entry.fingerprint) == (
        "created",
        op_id,
        "create_pending",
        result.fingerprint,
    )
    assert (entry.door, entry.actor, entry.http_status) == ("python", "submitter:pytest", None)


def test_a_taken_key_inserts_no_row_no_event_and_no_entry_through_the_claim(
    database_url: str, runtime: Runtime
) -> None:
    tenant, key = f"claim-{secrets.token_hex(4)}", secrets.token_hex(8)
    first = submit_operation(
        tenant=tenant,
        provider="sandbox",
        idempotency_key=key,
        command={"kind": "export"},
        requested_by="pytest",
        runtime=runtime,
    )
    assert first.operation_id is not None
    with transaction(database_url) as session:
        stored = store.load(session, uuid.UUID(first.operation_id))
    assert stored is not None
    # Another operation under the same (tenant, key), opened by the core as intake would.
    op, intent = opened_in(
        S.create_pending,
        at=utcnow(),
        tenant=tenant,
        idempotency_key=key,
        request_fingerprint=stored.request_fingerprint,
    )
    with transaction(database_url) as session:
        claimed = intake_store.insert(session, op, intent, created_entry(op), lock_timeout="1s")
    assert claimed is None
    assert _counts(database_url, tenant) == (1, 1, 1)


def test_a_key_held_by_an_uncommitted_submission_is_the_domain_error_in_progress(
    database_url: str,
) -> None:
    # The first submission's transaction holds (tenant, key) in the unique index and has
    # not committed; the second waits on it for its lock timeout, then gets the domain
    # error (Postgres's lock_not_available, 55P03, translated once by the store).
    tenant, key = f"claim-{secrets.token_hex(4)}", secrets.token_hex(8)
    first, first_intent = opened_in(
        S.create_pending, at=utcnow(), tenant=tenant, idempotency_key=key
    )
    second, second_intent = opened_in(
        S.create_pending, at=utcnow(), tenant=tenant, idempotency_key=key
    )
    with transaction(database_url) as holding:
        assert insert_opened(holding, first, first_intent).operation_id == first.operation_id
        with (
            pytest.raises(SubmissionInProgressError) as caught,
            transaction(database_url) as waiting,
        ):
            intake_store.insert(
                waiting, second, second_intent, created_entry(second), lock_timeout="200ms"
            )
        assert (caught.value.tenant, caught.value.idempotency_key) == (tenant, key)
        assert key in str(caught.value)
        # Nothing of the second was recorded; the first is still uncommitted.
        assert _counts(database_url, tenant) == (0, 0, 0)
    assert _counts(database_url, tenant) == (1, 1, 1)
    with transaction(database_url) as session:
        assert store.load(session, second.operation_id) is None
        assert store.verify(session, first.operation_id) == []


@contextmanager
def _statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Statements this thread sends through psycopg (a spy; nothing changes).

    Every execute, BEGIN or ping is one ``Connection.wait`` call that reads the server's
    answer at least once (twice when psycopg prepares the statement on that call); a
    pool's reset of an autocommit connection is a call that reads nothing, and no statement.
    """
    sent = [0]
    me = threading.get_ident()
    wait = psycopg.Connection.wait

    def answered(gen: Any) -> Any:
        read = False
        try:
            state = next(gen)
            while True:
                if state == Wait.R and not read:
                    read = True
                    sent[0] += 1
                state = gen.send((yield state))
        except StopIteration as done:
            return done.value

    def counted(self: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        mine = threading.get_ident() == me
        return wait(self, answered(gen) if mine else gen, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(psycopg.Connection, "wait", counted)
        # A pooled connection idle for 30 s is pinged when checked out: a round trip of
        # the pool's, not the submission's. The pool hands out its oldest idle connection,
        # which an earlier test in this process may have left that long.
        patched.setattr(db, "IDLE_PING_SECONDS", 3600.0)
        yield sent


def _http(tenant: str, key: str, command: dict[str, Any], runtime: Runtime) -> SubmitResult:
    """A submission as the HTTP door makes it: its status codes go into the log."""
    wanted = SubmissionRequest(
        tenant=tenant,
        provider="sandbox",
        idempotency_key=key,
        command=command,
        requested_by="pytest",
    )
    caller = Caller(actor="token:pytest", http_statuses=HTTP_STATUSES)
    return submit_request(wanted, door="http", caller=caller, runtime=runtime)


def test_a_replay_and_a_conflict_are_answered_and_logged_by_the_claims_own_statement(
    database_url: str, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant, key = f"claim-{secrets.token_hex(4)}", secrets.token_hex(8)
    first = _http(tenant, key, {"kind": "export"}, runtime)
    assert first.outcome is SubmitOutcome.created and first.operation_id is not None
    with _statements(monkeypatch) as replay_sent:
        replay = _http(tenant, key, {"kind": "export"}, runtime)
    with _statements(monkeypatch) as conflict_sent:
        conflict = _http(tenant, key, {"kind": "export", "n": 2}, runtime)
    # One statement each: the claim, which found the key taken, answered and logged it
    # (it was three: the claim, the stored read, the log entry).
    assert (replay_sent[0], conflict_sent[0]) == (1, 1)
    assert (replay.outcome, replay.operation_id, replay.state, replay.trace_id) == (
        SubmitOutcome.replayed,
        first.operation_id,
        "create_pending",
        first.trace_id,
    )
    assert replay.created_state == "create_pending" and replay.fingerprint == first.fingerprint
    assert (conflict.outcome, conflict.operation_id, conflict.created_state) == (
        SubmitOutcome.conflict,
        first.operation_id,
        None,
    )
    assert conflict.fingerprint != first.fingerprint
    with transaction(database_url) as session:
        entries = api_store.intake_for_key(session, tenant, key)
        op_id = uuid.UUID(first.operation_id)
        assert store.verify(session, op_id) == []
        row = store.load(session, op_id)
    assert row is not None and row.command == {"kind": "export"} and row.version == 1
    assert [
        (e.outcome, e.http_status, e.operation_id, e.state, e.trace_id, e.fingerprint, e.door)
        for e in entries
    ] == [
        (o, HTTP_STATUSES[o], op_id, "create_pending", first.trace_id, f, "http")
        for o, f in (
            ("created", first.fingerprint),
            ("replayed", first.fingerprint),
            ("conflict", conflict.fingerprint),
        )
    ]
    assert {e.actor for e in entries} == {"token:pytest"}
    assert _counts(database_url, tenant) == (1, 1, 3)


def test_a_key_committed_after_the_claim_began_is_read_afresh_and_answered_once(
    database_url: str, runtime: Runtime
) -> None:
    # The claim waits on the unique index for a submission that commits meanwhile: its
    # statement's snapshot cannot see that row, so the answer is read by a statement of
    # its own, and logged once.
    tenant, key = f"claim-{secrets.token_hex(4)}", secrets.token_hex(8)
    command = {"kind": "export"}
    probe = submit_operation(
        tenant=tenant,
        provider="sandbox",
        idempotency_key=f"probe-{key}",
        command=command,
        requested_by="pytest",
        runtime=runtime,
    )
    held, intent = opened_in(
        S.create_pending,
        at=utcnow(),
        tenant=tenant,
        idempotency_key=key,
        request_fingerprint=probe.fingerprint,
    )
    answers: list[SubmitResult] = []
    waiter = threading.Thread(
        target=lambda: answers.append(
            submit_operation(
                tenant=tenant,
                provider="sandbox",
                idempotency_key=key,
                command=command,
                requested_by="pytest",
                runtime=runtime,
            )
        )
    )
    with transaction(database_url) as holding:
        insert_opened(holding, held, intent)
        waiter.start()
        _until_a_claim_waits_on_a_lock(database_url)
    waiter.join(timeout=30)
    (answer,) = answers
    assert (answer.outcome, answer.operation_id) == (
        SubmitOutcome.replayed,
        str(held.operation_id),
    )
    with transaction(database_url) as session:
        outcomes = [e.outcome for e in api_store.intake_for_key(session, tenant, key)]
    assert outcomes == ["created", "replayed"]


def _until_a_claim_waits_on_a_lock(url: str) -> None:
    """Until a claim in this database waits on a lock (the held key's, in this test)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with transaction(url) as session:
            waiting = session.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND query LIKE 'WITH claimed AS%'"
                )
            ).scalar_one()
        if waiting:
            return
        time.sleep(0.02)
    raise AssertionError("no claim waited on the held key within 20 s")
