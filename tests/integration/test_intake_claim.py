"""The intake's one-statement insert (models/persistence/intake_store.py) against the real
Postgres: a new key writes the operation, its first event and the ``created`` intake entry,
and the chain verifies with the row's digest; a taken key writes nothing at all; a key
an uncommitted submission holds is the domain error, not a driver's.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from jobwarden.config.settings import get_settings
from jobwarden.models.errors import SubmissionInProgressError
from jobwarden.models.persistence import api_store, intake_store, store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.intake import SubmitOutcome, submit_operation
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
