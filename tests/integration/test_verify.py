"""`jobwarden verify` against the real Postgres: honest histories pass, every tamper is named.

Each operation is submitted through intake (the real claim of its key) and walked
to `succeeded` through the store, as the workers would write it. Tampering is
done the way an attacker with the database owner's rights would: with the
append-only triggers disabled inside one transaction of the test's own database.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from sqlalchemy import insert, select, text

from jobwarden.config.settings import get_settings
from jobwarden.models.history.chain import GENESIS_HASH, EventDraft, EventKind, chain, draft_fields
from jobwarden.models.history.row_facts import ROW_FACTS, row_digest
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import engine_for, transaction
from jobwarden.models.persistence.tables import HOT_COLUMNS, EventRow
from jobwarden.models.plan import Plan, StoredResult
from jobwarden.models.results.validation import ResultVerdict
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.intake import submit_operation
from jobwarden.tasks.runtime import Runtime, build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from tests.cli_runner import CliResult, run_cli
from tests.integration.factories import insert_legacy_row
from tests.integration.test_store import _new_row

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
QUEUE_SUFFIX = "verify"
# What a provider may send: 64-bit ids, doubles far beyond 2^53, tiny doubles.
BODY: dict[str, Any] = {
    "id": 2**64,
    "min": -(2**63),
    "size": 1e300,
    "mid": 1e20,
    "tenth": 0.1,
    "tiny": 1.5e-300,
}
RESULT = b'{"items": [1, 2, 3]}'
FORGED = b'{"items": [6, 6, 6]}'
SEQ_ACCEPTED, SEQ_POLL, SEQ_OBSERVED, SEQ_DECISION, SEQ_COLLECTED = 3, 4, 5, 6, 7


def _cli(*args: str) -> CliResult:
    """``jobwarden ARGS`` in this process (tests/cli_runner.py)."""
    return run_cli(*args)


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


def _step(url: str, op_id: uuid.UUID, plan: Plan) -> Operation:
    with transaction(url) as session:
        op = store.load(session, op_id)
        assert op is not None
        return store.write(session, op, plan, now=NOW)


def _event(kind: EventKind, src: S | None = None, to: S | None = None, **extra: Any) -> EventDraft:
    return EventDraft(
        kind=kind,
        actor="worker:test",
        at=NOW,
        from_state=src.value if src else None,
        to_state=to.value if to else None,
        **extra,
    )


def _succeeded(url: str, rt: Runtime) -> uuid.UUID:
    """An honest operation: submitted, accepted, polled, observed, collected, succeeded."""
    submitted = submit_operation(
        tenant=f"verify-{secrets.token_hex(4)}",
        provider="sandbox",
        idempotency_key=secrets.token_hex(8),
        command={"kind": "export", "rows": 3},
        requested_by="pytest",
        runtime=rt,
    )
    assert submitted.operation_id is not None
    op_id = uuid.UUID(submitted.operation_id)
    status_url = "http://127.0.0.1:8765/v1/jobs/job_1"
    steps = [
        Plan(changes={"create_attempts": 1}, events=(_event(EventKind.create_sent),)),
        Plan(
            changes={
                "state": S.accepted,
                "remote_job_id": "job_1",
                "status_url": status_url,
                "accepted_at": NOW,
            },
            events=(
                _event(
                    EventKind.create_accepted,
                    S.create_pending,
                    S.accepted,
                    http_status=202,
                    excerpt={"job_id": "job_1", "body": BODY},
                ),
            ),
        ),
        Plan(
            changes={"state": S.observing, "status_requests_used": 1},
            events=(_event(EventKind.poll_sent, S.accepted, S.observing),),
        ),
        Plan(
            changes={"transport_failures_used": 1, "last_http_status": 200},
            events=(_event(EventKind.observed, http_status=200, excerpt={"body": BODY}),),
        ),
        Plan(
            changes={
                "state": S.result_collecting,
                "result_reference": "http://127.0.0.1:8765/v1/results/job_1",
            },
            events=(
                _event(EventKind.decision, S.observing, S.result_collecting, cause="job finished"),
            ),
        ),
    ]
    for plan in steps:
        _step(url, op_id, plan)
    verdict = ResultVerdict(
        valid=True,
        problem=None,
        sha256=hashlib.sha256(RESULT).hexdigest(),
        size_bytes=len(RESULT),
        record_count=3,
    )
    summary = verdict.summary()
    collected = _event(
        EventKind.result_collected, S.result_collecting, S.succeeded, excerpt=summary
    )
    _step(
        url,
        op_id,
        Plan(
            changes={"state": S.succeeded, "validation_summary": summary},
            events=(collected,),
            result=StoredResult(content=RESULT, content_type="application/json", verdict=verdict),
        ),
    )
    return op_id


def _as_owner(url: str, *statements: str, **params: Any) -> None:
    """Run ``statements`` as the database owner may: history triggers off, then on again."""
    with engine_for(url).begin() as conn:
        # The intake log is append-only too, and refers to the operation.
        for table in ("operation_events", "intake_log"):
            conn.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER USER"))
        for statement in statements:
            conn.execute(text(statement), params)
        for table in ("operation_events", "intake_log"):
            conn.execute(text(f"ALTER TABLE {table} ENABLE TRIGGER USER"))


def _problems(url: str, op_id: uuid.UUID) -> list[str]:
    with transaction(url) as session:
        problems = store.verify(session, op_id)
    return [f"event {p.seq}: {p.problem}" if p.seq else p.problem for p in problems]


@pytest.fixture
def honest(database_url: str, runtime: Runtime) -> uuid.UUID:
    return _succeeded(database_url, runtime)


# --- honest histories ---------------------------------------------------------------------


def test_an_untouched_operation_holding_big_numbers_verifies_through_the_cli(
    honest: uuid.UUID,
) -> None:
    done = _cli("verify", str(honest))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "chain verified: 7 events"


def test_big_numbers_are_stored_faithfully_and_the_chain_still_verifies(
    database_url: str, honest: uuid.UUID
) -> None:
    with transaction(database_url) as session:
        excerpt = session.scalar(
            select(EventRow.excerpt)
            .where(EventRow.operation_id == honest)
            .where(EventRow.seq == SEQ_OBSERVED)
        )
    assert excerpt is not None
    # JSONB keeps the exact numbers; 1e300 and 1e20 come back spelled as integers.
    assert excerpt["body"] == {
        "id": 2**64,
        "min": -(2**63),
        "size": 10**300,
        "mid": 10**20,
        "tenth": 0.1,
        "tiny": 1.5e-300,
    }
    assert _problems(database_url, honest) == []


def test_every_write_binds_the_row_it_produced_in_its_last_event(
    database_url: str, honest: uuid.UUID
) -> None:
    with transaction(database_url) as session:
        digests = session.execute(
            select(EventRow.seq, EventRow.row_digest)
            .where(EventRow.operation_id == honest)
            .order_by(EventRow.seq)
        ).all()
        op = store.load(session, honest)
    assert op is not None
    assert all(len(digest or "") == 64 for _, digest in digests)  # one event per write here
    assert digests[-1][1] == row_digest({name: getattr(op, name) for name in ROW_FACTS})


def test_a_history_written_before_row_digests_verifies_and_says_the_row_is_unbound(
    database_url: str,
) -> None:
    # As the code before row digests wrote it: no digest, and 1e20 hashed as a float.
    row, _ = _new_row()
    draft = EventDraft(
        kind=EventKind.intent_recorded,
        actor="tester",
        at=NOW,
        to_state=row.state.value,
        excerpt={"n": 1e20},
    )
    material: dict[str, Any] = {
        "operation_id": str(row.operation_id),
        "seq": 1,
        "prev_hash": GENESIS_HASH,
        **draft_fields(draft),
    }
    old_hash = hashlib.sha256(rfc8785.dumps(material)).hexdigest()
    with transaction(database_url) as session:
        insert_legacy_row(session, row)
    values = {**draft_fields(draft), "at": NOW, "seq": 1, "prev_hash": GENESIS_HASH}
    with engine_for(database_url).begin() as conn:
        conn.execute(
            insert(store.EVENTS),
            {
                **values,
                "operation_id": row.operation_id,
                "operation_created_at": row.created_at,
                "hash": old_hash,
            },
        )
        conn.execute(
            text(HOT.format("event_count = 1, last_event_hash = :h")),
            {"h": old_hash, "id": row.operation_id},
        )
    done = _cli("verify", str(row.operation_id))
    assert done.returncode == 0, done.stderr
    assert "chain verified: 1 events" in done.stdout
    assert "not bound" in done.stdout


# --- tampering ---------------------------------------------------------------------------

EVENTS = "UPDATE operation_events SET {} WHERE operation_id = :id AND seq = {}"
ROW = "UPDATE operations SET {} WHERE operation_id = :id"
# What a poll changes, the chain head among it, is in the hot row (0033).
HOT = "UPDATE operation_timers SET {} WHERE operation_id = :id"
THIS_EVENT = "this event recorded"
SINCE = "a bound field was changed since"
ROW_DIFFERS = f"event {SEQ_COLLECTED}: operations row differs from the row this event recorded"

TAMPERS: list[tuple[str, list[str], list[str]]] = [
    (
        "event_excerpt",
        [EVENTS.format("""excerpt = jsonb_set(excerpt, '{job_id}', '"job_2"')""", SEQ_ACCEPTED)],
        [f"event {SEQ_ACCEPTED}: hash does not match contents"],
    ),
    (
        "event_big_number",
        [EVENTS.format("""excerpt = jsonb_set(excerpt, '{body,id}', '18446744073709551617')""", 5)],
        [f"event {SEQ_OBSERVED}: hash does not match contents"],
    ),
    (
        "event_cause",
        [EVENTS.format("cause = 'nothing happened'", SEQ_DECISION)],
        [f"event {SEQ_DECISION}: hash does not match contents"],
    ),
    (
        "event_kind",
        [EVENTS.format("kind = 'mystery'", SEQ_POLL)],
        [f"event {SEQ_POLL}: hash does not match contents"],
    ),
    (
        "event_row_digest",
        [EVENTS.format("row_digest = repeat('0', 64)", SEQ_DECISION)],
        [f"event {SEQ_DECISION}: hash does not match contents"],
    ),
    (
        "delete_one_event",
        [f"DELETE FROM operation_events WHERE operation_id = :id AND seq = {SEQ_POLL}"],
        [
            f"event {SEQ_OBSERVED}: expected seq {SEQ_POLL}",
            f"event {SEQ_OBSERVED}: prev_hash does not match",
        ],
    ),
    (
        "delete_the_last_event_and_set_the_head_back",
        [
            f"DELETE FROM operation_events WHERE operation_id = :id AND seq = {SEQ_COLLECTED}",
            HOT.format(
                f"event_count = {SEQ_DECISION}, last_event_hash = (SELECT hash FROM "
                f"operation_events WHERE operation_id = :id AND seq = {SEQ_DECISION})"
            ),
        ],
        [
            f"event {SEQ_DECISION}: operations row differs from the row this event recorded "
            "(state is succeeded, the history ends in result_collecting)",
            "result bytes are stored, but no result_collected event records them",
        ],
    ),
    (
        "delete_all_events_and_reset_the_head",
        [
            "DELETE FROM operation_events WHERE operation_id = :id",
            HOT.format("event_count = 0, last_event_hash = repeat('0', 64)"),
        ],
        [
            "no events: the history is empty",
            "result bytes are stored, but no result_collected event records them",
        ],
    ),
    (
        "row_state",
        [ROW.format("state = 'failed'")],
        [f"{ROW_DIFFERS} (state is failed, the history ends in succeeded)"],
    ),
    (
        "row_request_fingerprint",
        [ROW.format("request_fingerprint = repeat('e', 64)")],
        [f"{ROW_DIFFERS} (request_fingerprint differs from the one the intent recorded)"],
    ),
    *(
        (
            f"row_{name}",
            [(HOT if name in HOT_COLUMNS else ROW).format(f"{name} = {value}")],
            [f"{ROW_DIFFERS} ({SINCE})"],
        )
        for name, value in [
            ("remote_job_id", "'job_2'"),
            ("provider_token", "'jw-' || md5(random()::text)"),
            ("command", """'{"kind": "delete", "rows": 3}'::jsonb"""),
            ("result_reference", "'http://127.0.0.1:8765/v1/results/job_2'"),
            ("status_url", "'http://127.0.0.1:8765/v1/jobs/job_2'"),
            ("result_deadline", "result_deadline + interval '1 day'"),
            ("create_attempts", "create_attempts + 1"),
            ("status_requests_used", "status_requests_used - 1"),
            ("max_status_requests", "max_status_requests + 100"),
            ("transport_failures_used", "transport_failures_used - 1"),
            ("max_transport_failures", "max_transport_failures + 100"),
            ("extensions_used", "extensions_used + 1"),
            ("step_failures", "step_failures + 1"),
            ("result_fetch_attempts", "result_fetch_attempts + 1"),
        ]
    ),
    (
        "result_bytes",
        ["UPDATE operation_results SET content = :forged WHERE operation_id = :id"],
        [f"event {SEQ_COLLECTED}: stored result bytes do not match their sha256"],
    ),
    (
        "result_bytes_and_sha256",
        [
            "UPDATE operation_results SET content = :forged, sha256 = :forged_sha "
            "WHERE operation_id = :id"
        ],
        [f"event {SEQ_COLLECTED}: stored result sha256 differs from the digest {THIS_EVENT}"],
    ),
    (
        "result_deleted",
        ["DELETE FROM operation_results WHERE operation_id = :id"],
        [f"event {SEQ_COLLECTED}: the result bytes it recorded are missing"],
    ),
]


@pytest.mark.parametrize(
    ("statements", "expected"), [(s, e) for _, s, e in TAMPERS], ids=[n for n, _, _ in TAMPERS]
)
def test_verify_exits_1_naming_what_was_tampered_with(
    database_url: str, honest: uuid.UUID, statements: list[str], expected: list[str]
) -> None:
    assert _problems(database_url, honest) == []
    _as_owner(
        database_url,
        *statements,
        id=honest,
        forged=FORGED,
        forged_sha=hashlib.sha256(FORGED).hexdigest(),
    )
    done = _cli("verify", str(honest))
    assert done.returncode == 1, done.stdout
    assert done.stderr.splitlines() == expected
    assert "Traceback" not in done.stderr
    assert _problems(database_url, honest) == expected


def test_every_bound_counter_and_reference_has_a_tamper_case() -> None:
    edited = {name.removeprefix("row_") for name, _, _ in TAMPERS if name.startswith("row_")}
    required = {
        "state",
        "remote_job_id",
        "provider_token",
        "request_fingerprint",
        "command",
        "create_attempts",
        "status_requests_used",
        "max_status_requests",
        "transport_failures_used",
        "max_transport_failures",
        "result_reference",
    }
    assert required <= edited <= set(ROW_FACTS)


# --- anchoring the heads outside the database ---------------------------------------------


def _export(ops: set[uuid.UUID]) -> list[str]:
    done = _cli("verify", "--export-heads")
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if uuid.UUID(line.split()[0]) in ops]


def _rewrite_consistently(url: str, op_id: uuid.UUID) -> None:
    """What verify cannot see: the whole chain rewritten, every hash and the head recomputed."""
    with transaction(url) as session:
        op = store.load(session, op_id)
        events = store.events_for(session, op_id)
    assert op is not None
    drafts = [ev.draft for ev in events]
    drafts[SEQ_ACCEPTED - 1] = replace(drafts[SEQ_ACCEPTED - 1], excerpt={"job_id": "job_2"})
    digest = row_digest({name: getattr(op, name) for name in ROW_FACTS})
    forged = chain(str(op_id), drafts, last_seq=0, last_hash=GENESIS_HASH, row_digest=digest)
    with engine_for(url).begin() as conn:
        conn.execute(text("ALTER TABLE operation_events DISABLE TRIGGER USER"))
        conn.execute(text("DELETE FROM operation_events WHERE operation_id = :id"), {"id": op_id})
        conn.execute(insert(store.EVENTS), store._event_rows(forged, op.created_at))
        conn.execute(
            text("UPDATE operation_timers SET last_event_hash = :h WHERE operation_id = :id"),
            {"h": forged[-1].hash, "id": op_id},
        )
        conn.execute(text("ALTER TABLE operation_events ENABLE TRIGGER USER"))


def test_exported_heads_name_every_operation_with_its_event_count_and_head_hash(
    database_url: str, runtime: Runtime
) -> None:
    ops = {_succeeded(database_url, runtime) for _ in range(2)}
    lines = _export(ops)
    with transaction(database_url) as session:
        expected = {
            f"{op.operation_id} {op.event_count} {op.last_event_hash}"
            for op in (store.load(session, op_id) for op_id in ops)
            if op is not None
        }
    assert set(lines) == expected and len(lines) == 2


def test_heads_name_a_consistently_rewritten_chain_that_verify_alone_cannot_see(
    database_url: str, runtime: Runtime, tmp_path: Path
) -> None:
    kept, grown, rewritten, removed = (_succeeded(database_url, runtime) for _ in range(4))
    heads = tmp_path / "heads.txt"
    heads.write_text("\n".join(_export({kept, grown, rewritten, removed})) + "\n")
    assert _cli("verify", "--heads", str(heads)).returncode == 0
    # History that only grew after the export still matches it.
    with transaction(database_url) as session:
        op = store.load(session, grown)
        assert op is not None
        note = _event(EventKind.decision, cause="note after the export")
        store.write(session, op, Plan(events=(note,)), now=NOW)
    _rewrite_consistently(database_url, rewritten)
    assert _cli("verify", str(rewritten)).returncode == 0  # the documented blind spot
    _as_owner(
        database_url,
        "DELETE FROM operation_events WHERE operation_id = :id",
        "DELETE FROM operation_results WHERE operation_id = :id",
        "DELETE FROM intake_log WHERE operation_id = :id",
        "DELETE FROM operations WHERE operation_id = :id",
        id=removed,
    )
    done = _cli("verify", "--heads", str(heads))
    assert done.returncode == 1
    *named, total = done.stderr.splitlines()
    assert sorted(named) == sorted(
        [
            f"operation {rewritten}: event {SEQ_COLLECTED}: head changed: "
            "this event's hash is not the exported one",
            f"operation {removed}: disappeared: no such operation",
        ]
    )
    assert total == "2 of 4 operations do not match their exported heads"


def test_a_heads_file_that_is_not_an_export_is_one_line_and_exit_2(tmp_path: Path) -> None:
    heads = tmp_path / "heads.txt"
    heads.write_text(f"# exported earlier\n{uuid.uuid4()} seven {'0' * 64}\n")
    done = _cli("verify", "--heads", str(heads))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"{heads}:2: not a line --export-heads writes (id, event count, hash)"
    ]


def test_the_sweeper_marking_a_row_dispatched_does_not_unbind_it(
    database_url: str, honest: uuid.UUID
) -> None:
    # dispatched_at and next_poll_at are timers, written without events: not bound facts.
    with engine_for(database_url).begin() as conn:
        conn.execute(
            text(
                "UPDATE operation_timers SET dispatched_at = now(), next_poll_at = now() "
                "WHERE operation_id = :id"
            ),
            {"id": honest},
        )
    assert _problems(database_url, honest) == []


def test_verify_needs_no_lock_so_a_read_only_auditor_can_run_it(
    database_url: str, honest: uuid.UUID
) -> None:
    with transaction(database_url) as session:
        session.execute(text("SET TRANSACTION READ ONLY"))
        assert store.verify(session, honest) == []
