"""Issue 37's hand-written references (scripts/_poll_floor_durable.py and
scripts/_intake_floor_honest.py) do the durable work they claim, in one statement each.

A floor that quietly skipped the fence or the chain would flatter itself and make
jobwarden's ratio to it meaningless; these check the SQL on a scratch database."""

from __future__ import annotations

import hashlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest
import rfc8785
from psycopg.types.json import Jsonb

from tests.conftest import scratch_database

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _floor(name: str) -> ModuleType:
    sys.path.insert(0, str(SCRIPTS))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(SCRIPTS))


durable = _floor("_poll_floor_durable")
honest = _floor("_intake_floor_honest")


@pytest.fixture
def conn() -> Iterator[psycopg.Connection[Any]]:
    with scratch_database("jobwarden_floors") as url:
        dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
        with psycopg.connect(dsn, autocommit=True) as connection:
            yield connection


def test_the_durable_poll_writes_in_one_fenced_statement() -> None:
    sql = durable.WRITE.strip()
    assert ";" not in sql  # one statement: one round trip, one autocommit commit
    assert sql.startswith("WITH fenced AS (")
    assert "WHERE id = %(op)s AND version = %(version)s" in sql
    assert "INSERT INTO durable_events" in sql and "FROM fenced" in sql
    assert "INSERT INTO durable_timers" in sql and "FROM event" in sql
    body = durable.event_body(1, 1, "running", 200)
    assert (
        durable.chained_hash(b"p" * 32, body)
        == hashlib.sha256(b"p" * 32 + rfc8785.dumps(body)).digest()
    )


def _write(conn: psycopg.Connection[Any], version: int, prev: bytes, seq: int) -> Any:
    body = durable.event_body(1, seq, "running", 200)
    return conn.execute(
        durable.WRITE,
        {
            "op": 1,
            "version": version,
            "hash": durable.chained_hash(prev, body),
            "prev": prev,
            "body": Jsonb(body),
            "done": False,
            "status": "running",
            "delay": 0.001,
        },
    ).fetchone()


def test_the_durable_poll_chains_fences_and_keeps_history(conn: psycopg.Connection[Any]) -> None:
    conn.execute(durable.SCHEMA)
    conn.execute(
        "INSERT INTO durable_ops (id, job_id, round, chain_head) VALUES (1, 'j', 0, %s)",
        (durable.GENESIS,),
    )
    assert _write(conn, 0, durable.GENESIS, 1) is not None
    head = bytes(conn.execute(durable.RELOAD, {"op": 1}).fetchone()[1])  # type: ignore[index]
    assert _write(conn, 1, head, 2) is not None
    # A writer holding a stale version writes nothing: no event, no timer move.
    assert _write(conn, 1, head, 2) is None
    rows = conn.execute("SELECT seq, prev_hash, hash FROM durable_events ORDER BY seq").fetchall()
    assert [r[0] for r in rows] == [1, 2]
    assert bytes(rows[0][1]) == durable.GENESIS and bytes(rows[1][1]) == bytes(rows[0][2])
    assert conn.execute("SELECT count(*) FROM durable_timers").fetchone() == (1,)
    with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
        conn.execute("DELETE FROM durable_events")


def test_the_honest_intake_claims_with_its_first_event_in_one_statement(
    conn: psycopg.Connection[Any],
) -> None:
    assert ";" not in honest.CLAIM.strip()
    conn.execute(honest.SCHEMA)
    command: dict[str, Any] = {"kind": "export", "behaviour": {}, "n": 1}
    printed = honest.fingerprint("sandbox", command)
    assert (
        printed
        == hashlib.sha256(rfc8785.dumps({"provider": "sandbox", "command": command})).digest()
    )

    def claim() -> Any:
        fresh = uuid.uuid4()
        event = honest.first_event(fresh, "t", printed)
        return conn.execute(
            honest.CLAIM,
            {
                "op": fresh,
                "tenant": "t",
                "key": "k",
                "provider": "sandbox",
                "command": Jsonb(command),
                "fingerprint": printed,
                "prev": honest.GENESIS,
                "hash": honest.chained_hash(honest.GENESIS, event),
                "event": Jsonb(event),
            },
        ).fetchone()

    assert claim() is not None
    assert claim() is None  # the key is taken: neither a row nor an event is written
    assert conn.execute("SELECT count(*) FROM honest_operations").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM honest_events").fetchone() == (1,)
    with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
        conn.execute("UPDATE honest_events SET seq = 2")


def test_the_dbos_reference_loads_in_jobwardens_venv_and_its_table_counts_a_round(
    conn: psycopg.Connection[Any],
) -> None:
    """scripts/bench_poll.py --dbos reads the DBOS loop's names and table from jobwarden's
    venv, where DBOS is not installed: the module may import it only inside main()."""
    sys.modules.pop("dbos", None)
    dbos_loop = _floor("_poll_dbos")
    assert "dbos" not in sys.modules
    conn.execute(dbos_loop.SCHEMA)
    conn.execute(dbos_loop.SCHEMA)  # idempotent: each run's database is fresh, but still
    conn.execute("INSERT INTO dbos_ops (id, job_id, round) VALUES (1, 'j1', 0), (2, 'j2', 0)")
    conn.execute("UPDATE dbos_ops SET done = true, polls = 50 WHERE id = 1")
    # What the bench waits for and counts (scripts/bench_poll.py, dbos_steps).
    assert conn.execute("SELECT count(*) FROM dbos_ops WHERE round = 0 AND done").fetchone() == (1,)
    assert conn.execute("SELECT sum(polls) FROM dbos_ops WHERE round = 0").fetchone() == (50,)
    assert dbos_loop.READY.endswith(".") and dbos_loop.CHANNEL.isidentifier()
