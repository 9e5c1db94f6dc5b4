"""The partitioned history against a real Postgres (migration 0023): the migration with
rows in place and back, partitions made ahead, append-only on every partition, archiving
old months to the result store and verifying from it.

These tests run archiving, which acts on every partition of a database, so they use a
database of their own (a module's scratch database), never the run's shared one.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from jobwarden.models.errors import PartitionNotArchivedError
from jobwarden.models.history.archive import months_ahead, partition_name
from jobwarden.models.history.chain import GENESIS_HASH, EventDraft, EventKind, chain
from jobwarden.models.history.receipts import verify_receipt
from jobwarden.models.history.row_facts import ROW_FACTS, row_digest
from jobwarden.models.persistence import history_store, store
from jobwarden.models.persistence.db import dispose_all, engine_for, transaction
from jobwarden.models.persistence.history_store import ArchivedHistory
from jobwarden.models.persistence.migrate import alembic_config, upgrade
from jobwarden.models.plan import Plan
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.results.store import ResultStore
from tests.conftest import scratch_database
from tests.integration.factories import insert_legacy_row, insert_opened, with_history
from tests.integration.test_cli import _cli
from tests.integration.test_store import _new_row

NOW = datetime.now(UTC)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with scratch_database("jobwarden_history") as scratch:
        upgrade(scratch)
        yield scratch
        dispose_all()


@pytest.fixture(scope="module")
def results() -> ResultStore:
    return ResultStore.from_url(os.environ["JOBWARDEN_RESULT_STORE"])


def _month(year: int, month: int) -> datetime:
    return datetime(year, month, 10, 12, 0, tzinfo=UTC)


def _drafts(state: S, at: datetime) -> list[EventDraft]:
    return [
        EventDraft(
            kind=EventKind.intent_recorded, actor="tester", at=at, to_state="create_pending"
        ),
        EventDraft(kind=EventKind.create_sent, actor="w", at=at + timedelta(seconds=1)),
        EventDraft(
            kind=EventKind.decision,
            actor="w",
            at=at + timedelta(seconds=2),
            from_state="create_pending",
            to_state=state.value,
            excerpt={"why": "over", "n": 2**65},
        ),
    ]


def _operation(url: str, created: datetime, state: S = S.failed) -> uuid.UUID:
    """An operation created at ``created`` (its month's partition made first), three events."""
    with transaction(url) as session:
        session.execute(text("SELECT jobwarden_add_history_partition(:m)"), {"m": created})
    row = _new_row(
        state,
        created_at=created,
        updated_at=created + timedelta(seconds=2),
        next_poll_at=None,
        create_deadline=created + timedelta(minutes=5),
        result_deadline=created + timedelta(hours=1),
    )
    with transaction(url) as session:
        return insert_opened(session, *with_history(row, _drafts(state, created))).operation_id


def _partitions(url: str) -> dict[str, int]:
    with transaction(url) as session:
        return {p.name: p.rows for p in history_store.partitions(session)}


def _cli_on(url: str, *args: str) -> Any:
    return _cli(*args, env={"JOBWARDEN_DATABASE_URL": url})


def _segment_path(url: str, op_id: uuid.UUID) -> Path:
    with transaction(url) as session:
        done = history_store.archived(session, op_id)
    assert done is not None
    return Path(done.location.removeprefix("file://"))


def _archived_now(url: str, partition: str) -> None:
    """Run `jobwarden archive` and see ``partition`` archived and dropped (other months
    other tests left may be refused: each test looks at its own)."""
    done = _cli_on(url, "archive", "--retention-days", "0")
    assert f"archived  {partition}: " in done.stdout, done.stderr
    assert partition not in _partitions(url)


# --- the migration -------------------------------------------------------------------------


# Columns of the live model that revision 0021's table did not have yet.
AFTER_0021 = frozenset({"contract_digest", "priority"})  # 0026, 0031


def _insert_at_0021(url: str, created: datetime) -> uuid.UUID:
    """An operation with three events as revision 0021 stored them (no partition key)."""
    row, _ = _new_row(S.failed, created_at=created, updated_at=created, next_poll_at=None)
    with transaction(url) as session:
        # The row only: 0021's events differ.
        insert_legacy_row(session, row, absent=AFTER_0021, before_0033=True)
        digest = row_digest({name: getattr(row, name) for name in ROW_FACTS})
        chained = chain(
            str(row.operation_id),
            _drafts(S.failed, created),
            last_seq=0,
            last_hash=GENESIS_HASH,
            row_digest=digest,
        )
        for ev in store._event_rows(chained, created):
            del ev["operation_created_at"]
            ev["excerpt"] = psycopg.types.json.Jsonb(ev["excerpt"])
            names = ", ".join(ev)
            session.connection().exec_driver_sql(
                f"INSERT INTO operation_events ({names}) "
                f"VALUES ({', '.join(f'%({n})s' for n in ev)})",
                ev,
            )
        session.execute(
            text(
                "UPDATE operations SET event_count = 3, last_event_hash = :h "
                "WHERE operation_id = :id"
            ),
            {"h": chained[-1].hash, "id": row.operation_id},
        )
    return row.operation_id


def _verified(url: str, *ops: uuid.UUID) -> None:
    with transaction(url) as session:
        for op in ops:
            assert store.verify(session, op) == [], op


def _kind(url: str) -> str:
    with transaction(url) as session:
        return str(
            session.scalar(text("SELECT relkind FROM pg_class WHERE relname = 'operation_events'"))
        )


def test_the_migration_moves_existing_history_into_month_partitions_and_back() -> None:
    with scratch_database("jobwarden_m22") as scratch:
        upgrade(scratch, "0021")
        old = _insert_at_0021(scratch, _month(2003, 4))
        new = _insert_at_0021(scratch, NOW)
        upgrade(scratch)
        assert _kind(scratch) == "p"
        parts = _partitions(scratch)
        assert parts["operation_events_200304"] == 3
        assert parts[partition_name(NOW)] == 3
        # Made ahead: this month and the next two, and the DEFAULT safety net (empty).
        assert {partition_name(NOW + timedelta(days=31 * n)) for n in range(3)} <= set(parts)
        assert parts["operation_events_default"] == 0
        _verified(scratch, old, new)
        dispose_all()
        command.downgrade(alembic_config(scratch), "0021")
        assert _kind(scratch) == "r"
        with transaction(scratch) as session:
            assert session.scalar(text("SELECT count(*) FROM operation_events")) == 6
            assert session.scalar(text("SELECT to_regnamespace('event_partitions')")) is None
        dispose_all()
        upgrade(scratch)
        _verified(scratch, old, new)
        dispose_all()


# --- append-only, on the parent and on each partition ---------------------------------------

REFUSED = {
    "update": "UPDATE {} SET actor = 'mallory'",
    "delete": "DELETE FROM {}",
    "truncate": "TRUNCATE {}",
}


@pytest.mark.parametrize("statement", sorted(REFUSED))
def test_history_is_append_only_on_the_parent_and_on_every_partition_itself(
    url: str, statement: str
) -> None:
    for months in range(3):  # this month's partition and the two made ahead
        _operation(url, NOW + timedelta(days=31 * months))
    _operation(url, _month(2004, 2))
    # No partition for 2199: the DEFAULT partition takes it.
    row = _new_row(S.failed, created_at=_month(2199, 1), updated_at=_month(2199, 1))
    with transaction(url) as session:
        insert_opened(session, *with_history(row, _drafts(S.failed, _month(2199, 1))))
    held = [name for name, rows in _partitions(url).items() if rows]
    assert {"operation_events_default", "operation_events_200402"} <= set(held)
    assert len(held) >= 5
    tables = ["operation_events"] + [f'event_partitions."{name}"' for name in held]
    for table in tables:
        with engine_for(url).connect() as conn:
            with pytest.raises(DBAPIError) as caught:
                conn.execute(text(REFUSED[statement].format(table)))
            conn.rollback()
        assert isinstance(caught.value.orig, psycopg.errors.RestrictViolation), table


# --- archiving -------------------------------------------------------------------------------


def test_an_archived_month_is_dropped_and_each_operation_verifies_from_its_segment(
    url: str, tmp_path: Path
) -> None:
    old = [_operation(url, _month(2005, 6)), _operation(url, _month(2005, 6), S.succeeded)]
    current = _operation(url, NOW)
    with transaction(url) as session:
        before = {op: store.stored_events(session, op) for op in old}
    heads = _cli_on(url, "verify", "--export-heads")
    assert heads.returncode == 0, heads.stderr

    done = _cli_on(url, "archive", "--retention-days", "0")
    assert done.returncode == 0, done.stderr
    assert "archived  operation_events_200506: 2 histories in the result store" in done.stdout
    assert "operation_events_200506" not in _partitions(url)
    for op in old:
        answer = _cli_on(url, "verify", str(op))
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.strip() == "chain verified from archive: 3 events"
        segment = _segment_path(url, op).read_bytes()
        assert segment.count(b"\n") == 3
        with transaction(url) as session:
            done_row = history_store.archived(session, op)
        assert done_row is not None and done_row.sha256 == hashlib.sha256(segment).hexdigest()
        assert done_row.head_hash == before[op][-1].hash and done_row.event_count == 3
    live = _cli_on(url, "verify", str(current))
    assert live.stdout.strip() == "chain verified: 3 events"
    story = _cli_on(url, "history", str(old[0])).stdout.splitlines()
    # The events from the segment, then the submission that created it (the intake log).
    assert [line.split("  ")[-1].strip() for line in story if "  intake " not in line] == [
        "intent recorded -> create_pending",
        "create sent",
        "decision -> failed",
    ]
    assert [line.split()[2] for line in story if "  intake " in line] == ["created"]
    # Heads exported before the archive still hold, now proven from the segments.
    path = tmp_path / "heads.txt"
    path.write_text(heads.stdout)
    again = _cli_on(url, "verify", "--heads", str(path))
    assert again.returncode == 0, again.stderr
    listing = _cli_on(url, "partitions")
    assert "operation_events_200506" in listing.stdout
    assert "dropped, 2 histories in the result store" in listing.stdout


def test_a_tampered_or_missing_segment_is_named_by_verify(url: str) -> None:
    edited, removed = _operation(url, _month(2006, 1)), _operation(url, _month(2006, 1))
    _archived_now(url, "operation_events_200601")
    path = _segment_path(url, edited)
    path.write_bytes(path.read_bytes().replace(b'"why":"over"', b'"why":"done"'))
    answer = _cli_on(url, "verify", str(edited))
    assert answer.returncode == 1
    assert f"archived history segment {path.as_uri()}: sha256" in answer.stderr
    _segment_path(url, removed).unlink()
    answer = _cli_on(url, "verify", str(removed))
    assert answer.returncode == 1
    assert f"archived history segment {_segment_path(url, removed).as_uri()}: missing" in (
        answer.stderr
    )


def test_a_segment_rewritten_with_its_recorded_digest_still_fails_against_the_row(
    url: str, results: ResultStore
) -> None:
    # Whoever replaces a segment and its sha256 in archived_histories still meets the
    # operations row's head: the edited event's hash no longer matches its contents.
    op = _operation(url, _month(2006, 5))
    _archived_now(url, "operation_events_200605")
    path = _segment_path(url, op)
    forged = path.read_bytes().replace(b'"why":"over"', b'"why":"done"')
    path.write_bytes(forged)
    with engine_for(url).begin() as conn:
        conn.execute(
            text(
                "UPDATE archived_histories SET sha256 = :s, size_bytes = :n "
                "WHERE operation_id = :id"
            ),
            {"s": hashlib.sha256(forged).hexdigest(), "n": len(forged), "id": op},
        )
    answer = _cli_on(url, "verify", str(op))
    assert answer.returncode == 1
    assert "event 3: hash does not match contents" in answer.stderr


def test_an_event_written_after_its_month_was_archived_joins_the_chain_from_default(
    url: str,
) -> None:
    # An ended operation can still gain an event after its month left (a person's
    # resubmit or accept_result records one on the old operation): with its partition
    # dropped the row goes to DEFAULT, and verify proves segment and live rows as one chain.
    op = _operation(url, _month(2006, 9))
    _archived_now(url, "operation_events_200609")
    decided_at = NOW.replace(microsecond=0)
    with transaction(url) as session:
        row = store.load(session, op)
        assert row is not None
        note = EventDraft(kind=EventKind.decision, actor="person:ann", at=decided_at, cause="note")
        store.write(session, row, Plan(events=(note,)), now=decided_at)
    with transaction(url) as session:
        where = session.execute(
            text(
                "SELECT tableoid::regclass::text, seq FROM operation_events "
                "WHERE operation_id = :id"
            ),
            {"id": op},
        ).all()
    assert where == [("event_partitions.operation_events_default", 4)]
    answer = _cli_on(url, "verify", str(op))
    assert answer.stdout.strip() == "chain verified from archive: 4 events", answer.stderr
    # The next run leaves it be: its month is gone, the DEFAULT partition stays attached.
    again = _cli_on(url, "archive", "--retention-days", "0")
    assert "operation_events_200609" not in again.stdout + again.stderr
    assert _partitions(url)["operation_events_default"] >= 1
    assert _cli_on(url, "verify", str(op)).returncode == 0
    # Tampering with the live part is still caught against the segment's head.
    with engine_for(url).begin() as conn:
        conn.execute(text("ALTER TABLE operation_events DISABLE TRIGGER USER"))
    try:
        with engine_for(url).begin() as conn:
            conn.execute(
                text(
                    "UPDATE event_partitions.operation_events_default SET actor = 'mallory' "
                    "WHERE operation_id = :id"
                ),
                {"id": op},
            )
    finally:
        with engine_for(url).begin() as conn:
            conn.execute(text("ALTER TABLE operation_events ENABLE TRIGGER USER"))
    answer = _cli_on(url, "verify", str(op))
    assert answer.returncode == 1 and "event 4: hash does not match contents" in answer.stderr


def test_a_month_holding_an_operation_that_has_not_ended_is_refused_naming_it(url: str) -> None:
    ended = _operation(url, _month(2007, 3))
    running = _operation(url, _month(2007, 3), S.observing)
    done = _cli_on(url, "archive", "--retention-days", "0")
    assert done.returncode == 1
    assert (
        f"refused   operation_events_200703: partition operation_events_200703 holds "
        f"operation {running}, which has not ended (state observing)"
    ) in done.stderr
    assert _partitions(url)["operation_events_200703"] == 6
    with transaction(url) as session:
        assert history_store.archived(session, ended) is None


def test_a_partition_is_not_dropped_while_a_history_in_it_is_not_covered_by_its_segment(
    url: str,
) -> None:
    op = _operation(url, _month(2008, 8))
    name = "operation_events_200808"
    with transaction(url) as session:
        history_store.record_archived(
            session,
            ArchivedHistory(
                operation_id=op,
                partition=name,
                location="file:///nowhere.jsonl",
                sha256="0" * 64,
                size_bytes=1,
                event_count=2,  # an event was written after this segment
                head_hash="0" * 64,
                archived_at=NOW,
            ),
        )
    with (
        pytest.raises(PartitionNotArchivedError, match=f"operation {op} has 3 events here"),
        transaction(url) as session,
    ):
        history_store.detach_and_drop(session, name, lock_timeout="2s")
    assert _partitions(url)[name] == 3  # rolled back: still attached, every row in place
    # An archiving run re-archives it whole (a new, immutable segment), then drops it.
    _archived_now(url, name)
    assert _cli_on(url, "verify", str(op)).stdout.strip() == "chain verified from archive: 3 events"


def test_a_month_whose_rows_went_to_the_default_partition_is_named_not_created(url: str) -> None:
    # Maintenance fell behind: an operation of 2031-07 was written before its partition.
    row = _new_row(S.failed, created_at=_month(2031, 7), updated_at=_month(2031, 7))
    with transaction(url) as session:
        insert_opened(session, *with_history(row, _drafts(S.failed, _month(2031, 7))))
    with transaction(url) as session:
        problems = history_store.ensure_partitions(session, _month(2031, 6), lock_timeout="2s")
    assert problems == [
        "operation_events_203107: the DEFAULT partition already holds rows of that month"
    ]
    parts = _partitions(url)
    assert "operation_events_203106" in parts and "operation_events_203108" in parts
    assert parts["operation_events_default"] >= 3
    _verified(url, row.op.operation_id)
    listing = json.loads(_cli_on(url, "partitions", "--json").stdout)
    default = [p for p in listing if p["partition"] == "operation_events_default"]
    assert len(default) == 1
    assert default[0]["state"] == "holds rows of months that had no partition"
    june = [p for p in listing if p["partition"] == "operation_events_203106"]
    assert june == [
        {
            "partition": "operation_events_203106",
            "range": "2031-06-01 .. 2031-07-01",
            "rows": 0,
            "state": "attached",
        }
    ]
    # People read the same as a table: one row per partition under a header.
    table = _cli_on(url, "partitions").stdout.splitlines()
    assert table[0].split() == ["PARTITION", "RANGE", "ROWS", "STATE"]
    (june_row,) = [line for line in table if line.startswith("operation_events_203106")]
    june_cells = ["operation_events_203106", "2031-06-01", "..", "2031-07-01", "0", "attached"]
    assert june_row.split() == june_cells


# --- beat's run, and the command's retention --------------------------------------------------


def test_beat_makes_partitions_ahead_and_archives_only_once_a_retention_is_set(
    url: str, results: ResultStore
) -> None:
    from types import SimpleNamespace

    from jobwarden.config.settings import Settings
    from jobwarden.tasks.history_archive import maintain

    op = _operation(url, _month(2009, 9))
    name = "operation_events_200909"
    ahead = [partition_name(m) for m in months_ahead(NOW)]
    with transaction(url) as session:  # the last month made ahead, away: to see it made again
        session.execute(
            text(f'ALTER TABLE operation_events DETACH PARTITION event_partitions."{ahead[-1]}"')
        )
        session.execute(
            text(f'ALTER TABLE event_partitions."{ahead[-1]}" RENAME TO set_aside_for_a_test')
        )
    unset = SimpleNamespace(settings=Settings(database_url=url), result_store=results)
    assert maintain(unset) == []  # type: ignore[arg-type]
    parts = _partitions(url)
    assert name in parts  # no retention set: nothing archived
    assert set(ahead) <= set(parts)
    kept = Settings(database_url=url, history_retention_days=30)
    outcomes = maintain(SimpleNamespace(settings=kept, result_store=results))  # type: ignore[arg-type]
    assert [o.outcome for o in outcomes if o.partition == name] == ["archived"]
    assert name not in _partitions(url)
    _verified_from_archive_cli(url, op)


def _verified_from_archive_cli(url: str, op: uuid.UUID) -> None:
    answer = _cli_on(url, "verify", str(op))
    assert answer.stdout.strip() == "chain verified from archive: 3 events", answer.stderr


def test_the_archive_command_needs_a_retention(url: str) -> None:
    done = _cli_on(url, "archive")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "archive needs --retention-days N (or JOBWARDEN_HISTORY_RETENTION_DAYS)"
    )


def test_the_api_story_and_the_console_page_show_an_archived_history_verified(
    url: str,
) -> None:
    import httpx

    from jobwarden.config.settings import Settings
    from jobwarden.console.app import create_app
    from tests.api_server import serving
    from tests.integration.api_helpers import make_token
    from tests.integration.test_console import login

    op = _operation(url, _month(2010, 10))
    _archived_now(url, "operation_events_201010")
    headers = make_token(url, "t1", "reader", ["read"])
    app = create_app(Settings(database_url=url))
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        story = client.get(f"/v1/operations/{op}/events", headers=headers).json()
        assert [(e["seq"], e["kind"]) for e in story["events"]] == [
            (1, "intent_recorded"),
            (2, "create_sent"),
            (3, "decision"),
        ]
        assert story["chain"] == {"verified": True, "problems": []}
        with login(base, headers["Authorization"].split()[1]) as console:
            page = console.get(f"/console/operations/{op}")
            assert page.status_code == 200 and "✔ chain verified" in page.text
        _segment_path(url, op).unlink()
        gone = client.get(f"/v1/operations/{op}/events", headers=headers).json()
        assert gone["chain"]["verified"] is False
        assert gone["chain"]["problems"][0]["problem"].endswith(": missing")


def test_a_segment_lost_after_an_interrupted_run_is_written_again_before_the_drop(
    url: str, results: ResultStore
) -> None:
    from jobwarden.tasks.history_archive import archive

    op = _operation(url, _month(2013, 2))
    name = "operation_events_201302"

    def stop_before_drop(point: str, scope: str) -> None:
        if (point, scope) == ("archive_before_drop", name):
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        archive(url, results, now=NOW, retention_days=0, fault=stop_before_drop)
    assert name in _partitions(url)
    _segment_path(url, op).unlink()  # the store lost it while the month was still attached
    outcomes = archive(url, results, now=NOW, retention_days=0)
    assert [o.detail for o in outcomes if o.partition == name] == [
        "1 histories in the result store (1 written now); partition detached and dropped"
    ]
    _verified_from_archive_cli(url, op)


def test_the_receipt_of_an_archived_history_carries_its_segment_and_verifies(
    url: str, tmp_path: Path
) -> None:
    key = Ed25519PrivateKey.generate()
    key_file = tmp_path / "receipt-key.pem"
    key_file.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    # A month of its own: another test of this module leaves a running operation in 2007-03.
    op, altered = _operation(url, _month(2011, 11)), _operation(url, _month(2011, 11))
    with transaction(url) as session:
        before = store.stored_events(session, op)
    _archived_now(url, "operation_events_201111")
    env = {"JOBWARDEN_DATABASE_URL": url, "JOBWARDEN_RECEIPT_SIGNING_KEY_FILE": str(key_file)}
    out = tmp_path / "receipt.json"
    written = _cli("receipt", str(op), "--out", str(out), env=env)
    assert written.returncode == 0, written.stderr
    document = json.loads(out.read_text())
    assert [e["hash"] for e in document["events"]] == [e.hash for e in before]
    assert verify_receipt(document, key.public_key()) == []

    path = _segment_path(url, altered)
    path.write_bytes(path.read_bytes().replace(b'"why":"over"', b'"why":"done"'))
    refused = _cli("receipt", str(altered), "--out", str(tmp_path / "no.json"), env=env)
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"archived history segment {path.as_uri()}: sha256")
    assert not (tmp_path / "no.json").exists()
