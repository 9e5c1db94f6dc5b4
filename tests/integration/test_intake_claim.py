"""The intake's one-statement claim (models/persistence/intake_store.py) against the real Postgres:
a new key writes the operation, its first event and the ``created`` intake entry, and
the chain verifies with the row's digest; a taken key writes nothing at all.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from jobwarden.config.settings import get_settings
from jobwarden.models.history.chain import GENESIS_HASH, EventDraft, EventKind, chain
from jobwarden.models.persistence import api_store, intake_store, store
from jobwarden.models.persistence.db import transaction
from jobwarden.tasks.intake import SubmitOutcome, submit_operation
from jobwarden.tasks.runtime import Runtime, build_runtime, utcnow
from jobwarden.tasks.runtime import close as close_runtime

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
        (entry,) = api_store.intake_for_key(session, tenant, key)
    assert stored is not None
    op_id = uuid.uuid4()
    now = utcnow()
    values = {
        c: getattr(stored, c)
        for c in ("tenant", "idempotency_key", "provider", "method", "route", "command")
    } | {
        "operation_id": op_id,
        "provider_token": f"jw-{op_id.hex}",
        "request_fingerprint": stored.request_fingerprint,
        "state": "create_pending",
        "version": 1,
        "trace_id": secrets.token_hex(16),
        "requested_by": "pytest",
        "authorized_by": "pytest",
        "created_at": now,
        "create_deadline": now,
        "result_deadline": now,
        "max_status_requests": 1,
        "max_transport_failures": 1,
        "consecutive_rate_limited": 0,
        "poll_attempt": 0,
        "updated_at": now,
    }
    draft = EventDraft(kind=EventKind.intent_recorded, actor="pytest", at=now, to_state="x")
    (bound,) = chain(str(op_id), [draft], last_seq=0, last_hash=GENESIS_HASH)
    with transaction(database_url) as session:
        claimed = intake_store.claim(session, values, bound, entry, lock_timeout="1s")
    assert claimed is False
    assert _counts(database_url, tenant) == (1, 1, 1)
