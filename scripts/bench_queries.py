"""The HTTP API's reads over a million operations: first and deep pages, per filter.

Creates a scratch database of its own (dropped at the end, whatever happens),
applies the migrations, fills it with ``--rows`` operations in one
INSERT … SELECT generate_series per chunk (no Python per row), ANALYZEs, then
times the real query functions of models/persistence/query_store.py: the first page and a
deep page (a cursor ~90 % into the tenant's rows) for each filter, plus the
escalations list and its counts. Prints p50/p99 in ms and the indexes each
plan uses. A benchmark prints figures; no test times anything.

    .venv/bin/python scripts/bench_queries.py --rows 1000000 --repeat 50
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# The big tenant holds 60 % of the rows; nine small ones share the rest.
TENANTS = 10
BIG = "tenant-0"

# Row i's columns, as SQL over the series value i (deterministic, so runs compare).
FILL = """
WITH inserted AS (
INSERT INTO operations (
    operation_id, tenant, provider, idempotency_key, provider_token, request_fingerprint,
    method, route, command, remote_job_id, status_url, state, trace_id,
    requested_by, authorized_by, created_at, create_deadline, result_deadline,
    create_attempts, max_transport_failures, extensions_used,
    step_failures, result_fetch_attempts, escalation_reason, state_since)
SELECT
    md5('op' || i)::uuid,
    CASE WHEN i % 10 < 6 THEN 'tenant-0' ELSE 'tenant-' || (1 + i % 9) END,
    (ARRAY['sandbox', 'azure_lro', 'google_aip151', 'openai_batch'])[1 + (i / 7) % 4],
    'key-' || i,
    'jw-' || md5('tok' || i),
    md5('fp' || i) || md5('fp2' || i),
    'POST', '/v1/jobs', '{"n": 1}'::jsonb,
    'job_' || i, '/v1/jobs/job_' || i,
    s.state, substr(md5('tr' || i), 1, 32),
    'submitter', 'submitter',
    t.created, t.created + interval '5 minutes', t.created + interval '1 hour',
    1, 10, 0, 0, 0,
    CASE WHEN s.state IN ('escalated', 'result_timed_out', 'cancellation_unconfirmed')
         THEN (ARRAY['unknown_state', 'request_budget_exhausted', 'rate_limited',
                     'deadline_exceeded'])[1 + (i / 3) % 4] END,
    t.created + interval '10 minutes'
FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS i,
LATERAL (SELECT timestamptz '2026-01-01 00:00+00' + (i * interval '2 seconds') AS created) t,
LATERAL (SELECT CASE
    WHEN i % 1000 = 7 THEN 'escalated'
    WHEN i % 1000 = 8 THEN 'awaiting_approval'
    WHEN i % 2000 = 9 THEN 'result_timed_out'
    WHEN i % 100 < 5 THEN 'observing'
    WHEN i % 100 < 8 THEN 'failed'
    ELSE 'succeeded' END AS state) s
RETURNING operation_id, created_at)
-- What a poll changes, in the hot row (0033).
INSERT INTO operation_timers (
    operation_id, version, status_requests_used, max_status_requests,
    transport_failures_used, consecutive_rate_limited, poll_attempt, event_count,
    last_event_hash, updated_at)
SELECT operation_id, 1, 3, 200, 0, 0, 3, 1,
    md5('head' || operation_id) || md5('head2' || operation_id),
    created_at + interval '10 minutes'
FROM inserted
"""


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def _indexes(plan: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.add(plan["Index Name"])
        for value in plan.values():
            found |= _indexes(value)
    elif isinstance(plan, list):
        for value in plan:
            found |= _indexes(value)
    return found


# What a poll's fenced write changes: its hot row (operation_timers, 0033), not the
# operations row the queries read.
POLL_WRITE = """
UPDATE operation_timers SET status_requests_used = status_requests_used,
    version = version + 1, updated_at = now()
WHERE operation_id = md5('op' || :i)::uuid
"""


def _write_cost(engine: Any, writes: int, rows: int) -> None:
    """A poll-shaped UPDATE's cost with the query indexes (migration 0010) and without.

    Since 0021 no column such an update moves is indexed, so it is HOT whenever its page
    has room, and the query indexes cost a poll nothing; before, every poll added an entry
    to every index of the row.
    """
    from sqlalchemy import text

    from jobwarden.models.persistence.tables import QUERY_INDEXES

    def run() -> tuple[float, float]:
        samples = []
        with engine.connect() as conn:
            for n in range(writes):
                t0 = time.perf_counter()
                # Observing rows (i % 100 in 0..4), spread over the table.
                i = (n * 7919 * 100 + n % 5) % rows
                updated = conn.execute(text(POLL_WRITE), {"i": i}).rowcount
                conn.commit()
                assert updated == 1, f"row {i} missing"
                samples.append((time.perf_counter() - t0) * 1000)
        return _percentiles(samples)

    with_indexes = run()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for index in QUERY_INDEXES:
            conn.execute(text(f"DROP INDEX {index.name}"))
    without = run()
    print(f"\npoll-shaped UPDATE + COMMIT, {writes} each     {'p50 ms':>8} {'p99 ms':>8}")
    print(f"{'with the query indexes (0010)':<52} {with_indexes[0]:>8.2f} {with_indexes[1]:>8.2f}")
    print(f"{'without them':<52} {without[0]:>8.2f} {without[1]:>8.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--chunk", type=int, default=100_000)
    parser.add_argument(
        "--admin-url",
        default=os.environ.get(
            "JOBWARDEN_TEST_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
        help="a Postgres URL allowed to CREATE DATABASE (env JOBWARDEN_TEST_ADMIN_URL)",
    )
    args = parser.parse_args()

    from sqlalchemy import create_engine, select, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.orm import Session

    name = f"jobwarden_bench_queries_{secrets.token_hex(4)}"
    admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    url = make_url(args.admin_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        os.environ["JOBWARDEN_DATABASE_URL"] = url
        from jobwarden.models.persistence import query_store
        from jobwarden.models.persistence.db import dispose_all, engine_for
        from jobwarden.models.persistence.migrate import upgrade
        from jobwarden.models.persistence.tables import NEEDS_A_HUMAN
        from jobwarden.models.states import OperationState as S

        upgrade(url)
        engine = engine_for(url)
        started = time.perf_counter()
        with engine.begin() as conn:
            for first in range(0, args.rows, args.chunk):
                last = min(args.rows, first + args.chunk) - 1
                conn.execute(text(FILL), {"first": first, "last": last})
                print(f"  {last + 1:>9,} rows", flush=True)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE operations"))
        print(f"filled {args.rows:,} operations in {time.perf_counter() - started:.1f} s")

        ops = query_store.OPERATIONS
        with Session(engine) as session:
            total = session.scalar(
                text("SELECT count(*) FROM operations WHERE tenant = :t"), {"t": BIG}
            )
            deep_at = int((total or 0) * 0.9)

            def position(query: Any, key: str) -> query_store.Position | None:
                # The sort key of the row ~90 % into the filtered list: a deep page's cursor.
                count = session.scalar(select(text("count(*)")).select_from(query.subquery()))
                row = session.execute(
                    query.order_by(ops.c[key], ops.c.operation_id)
                    .offset(int((count or 0) * 0.9))
                    .limit(1)
                ).first()
                return None if row is None else query_store.Position(at=row[0], operation_id=row[1])

            def base(**where: Any) -> Any:
                query = select(ops.c.created_at, ops.c.operation_id).where(ops.c.tenant == BIG)
                for column, value in where.items():
                    query = query.where(ops.c[column] == value)
                return query

            filters: dict[str, dict[str, Any]] = {
                "no filter": {},
                "state=observing": {"state": S.observing},
                "state=escalated": {"state": S.escalated},
                "provider=azure_lro": {"provider": "azure_lro"},
                "reason=unknown_state": {"reason": "unknown_state"},
                "remote_job_id": {"remote_job_id": f"job_{deep_at // 6 * 10}"},
            }
            cases: dict[str, Callable[[], Any]] = {}
            for label, given in filters.items():
                where = {("escalation_reason" if k == "reason" else k): v for k, v in given.items()}
                deep = position(base(**where), "created_at")
                for depth, after in (("first", None), ("deep", deep)):
                    f = query_store.OperationFilter(tenant=BIG, limit=50, after=after, **given)
                    cases[f"list {label}, {depth} page"] = partial(
                        query_store.list_operations, session, f
                    )
            waiting = (
                select(ops.c.state_since, ops.c.operation_id)
                .where(ops.c.tenant == BIG)
                .where(ops.c.state.in_([s.value for s in NEEDS_A_HUMAN]))
            )
            deep_wait = position(waiting, "state_since")
            cases["escalations, first page"] = lambda: query_store.escalations(
                session, BIG, limit=50, after=None
            )
            cases["escalations, deep page"] = lambda: query_store.escalations(
                session, BIG, limit=50, after=deep_wait
            )
            cases["escalation counts"] = lambda: query_store.escalation_counts(session, BIG)

            plans: dict[str, set[str]] = {}
            results: dict[str, tuple[float, float]] = {}
            for label, run in cases.items():
                run()  # warm the cache and the plan
                samples = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    run()
                    samples.append((time.perf_counter() - t0) * 1000)
                results[label] = _percentiles(samples)
                plans[label] = set()
            session.rollback()

            # Which index each query walks: EXPLAIN the statement the function compiled.
            from sqlalchemy import event

            statements: list[tuple[str, Any]] = []

            def remember(_c: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
                statements.append((statement, params))

            conn = session.connection()
            for label, run in cases.items():
                statements.clear()
                event.listen(conn, "before_cursor_execute", remember)
                run()
                event.remove(conn, "before_cursor_execute", remember)
                for statement, params in statements:
                    plan = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", params)
                    plans[label] |= _indexes(plan.scalar())
            session.rollback()

        heading = f"query (tenant with {total:,} rows, limit 50)"
        print(f"\n{heading:<52} {'p50 ms':>8} {'p99 ms':>8}  indexes")
        for label, (p50, p99) in results.items():
            used = ", ".join(sorted(plans[label])) or "none (seq scan)"
            print(f"{label:<52} {p50:>8.2f} {p99:>8.2f}  {used}")
        _write_cost(engine, args.repeat * 20, args.rows)
        dispose_all()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
