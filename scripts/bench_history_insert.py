"""Postgres CPU of one event insert: the plain history table (0021) against the
partitioned one (0023).

A poll appends one event row; before 0023 that row wrote two btree entries (the
``event_id`` primary key and the unique ``(operation_id, seq)``), after it one btree
entry (the primary key ``(operation_id, seq, operation_created_at)``) and a BRIN index
that an append touches only to widen a summarised range, through partition routing.

Two scratch databases, one migrated to 0021 and one to head, each with --operations
operations; then --rounds rounds alternating A, B, each inserting --events events per
operation, one prepared statement per event, in one transaction per round (a poll's
write also commits, at the same cost in both layouts, so that cost is left out). Per
round it reads the backend's CPU (utime + stime from /proc) and prints the medians per
insert and their ratio. Linux only; run where Postgres is local. Machines are noisy:
read the ratio.

    .venv/bin/python scripts/bench_history_insert.py --operations 200 --events 20 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

from _bench_support import cpu_seconds  # noqa: E402 - after the path set-up above

PLAIN = (
    "INSERT INTO operation_events (operation_id, seq, actor, at, kind, excerpt, prev_hash, hash)"
    " VALUES (%s, %s, 'worker', %s, 'polled', %s, %s, %s)"
)
PARTITIONED = (
    "INSERT INTO operation_events (operation_id, seq, actor, at, kind, excerpt, prev_hash, hash,"
    " operation_created_at) VALUES (%s, %s, 'worker', %s, 'polled', %s, %s, %s, %s)"
)


def _operations(url: str, count: int, created: datetime) -> list[uuid.UUID]:
    """Rows without history (the rounds append it), as the 0021 table holds them too."""
    from jobwarden.models.persistence.db import transaction
    from jobwarden.models.states import OperationState as S
    from tests.integration.factories import insert_legacy_row, opened_in

    ops = []
    with transaction(url) as session:
        for _ in range(count):
            row, _ = opened_in(
                S.observing,
                at=created,
                tenant="bench",
                requested_by="bench",
                command={},
                create_deadline=created + timedelta(hours=1),
                result_deadline=created + timedelta(hours=1),
                max_status_requests=10_000,
                max_transport_failures=3,
                next_poll_at=None,
                dispatched_at=None,
            )
            # The row only: 0021's events differ; contract_digest came with 0026.
            insert_legacy_row(session, row, absent=frozenset({"contract_digest"}))
            ops.append(row.operation_id)
    return ops


def _round(  # noqa: PLR0913, PLR0917 - a benchmark round's every input, once
    dsn: str,
    sql: str,
    ops: list[uuid.UUID],
    first: int,
    events: int,
    created: datetime,
    partitioned: bool,
) -> float:
    """Backend CPU seconds per insert over one round."""
    import psycopg
    from psycopg.types.json import Jsonb

    with psycopg.connect(dsn) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        before = cpu_seconds(pid)
        for seq in range(first, first + events):
            for op in ops:
                params: list[object] = [
                    op,
                    seq,
                    created,
                    Jsonb({"request": seq, "of": 10_000}),
                    "p" * 64,
                    "h" * 64,
                ]
                if partitioned:
                    params.append(created)
                conn.execute(sql, params, prepare=True)
        conn.commit()
        spent = cpu_seconds(pid) - before
    return spent / (events * len(ops))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--admin-url",
        default=os.environ.get(
            "JOBWARDEN_TEST_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
    )
    args = parser.parse_args()
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import upgrade

    admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    names = {"plain": "0021", "partitioned": "head"}
    urls: dict[str, str] = {}
    created = datetime.now(UTC)
    try:
        for system, revision in names.items():
            name = f"jobwarden_bench_history_{system}_{secrets.token_hex(4)}"
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            urls[system] = (
                make_url(args.admin_url).set(database=name).render_as_string(hide_password=False)
            )
            upgrade(urls[system], revision)
        ops = {system: _operations(url, args.operations, created) for system, url in urls.items()}
        dispose_all()
        figures: dict[str, list[float]] = {system: [] for system in urls}
        print(f"{'round':>5} {'system':<12} {'postgres us/insert':>19}")
        for n in range(args.rounds + 1):  # round 0 warms up
            for system, url in urls.items():
                dsn = url.replace("postgresql+psycopg://", "postgresql://")
                sql = PARTITIONED if system == "partitioned" else PLAIN
                per = _round(
                    dsn,
                    sql,
                    ops[system],
                    1 + n * args.events,
                    args.events,
                    created,
                    system == "partitioned",
                )
                label = "warm" if n == 0 else str(n)
                print(f"{label:>5} {system:<12} {per * 1e6:>19.1f}")
                if n:
                    figures[system].append(per)
        plain, partitioned = (statistics.median(figures[s]) for s in ("plain", "partitioned"))
        print(
            f"medians: plain {plain * 1e6:.1f} us, partitioned {partitioned * 1e6:.1f} us per "
            f"insert; ratio partitioned / plain {partitioned / plain:.2f}"
        )
    finally:
        dispose_all()
        with admin.connect() as conn:
            for url in urls.values():
                name = make_url(url).database
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
