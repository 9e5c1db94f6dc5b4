"""What one /metrics scrape costs the database as the history grows.

Creates a scratch database of its own (dropped at the end, whatever happens), applies the
migrations, fills ``--rows`` operations (scripts/bench_queries.py's fill) and
``--events-per-operation`` events each (provider answers of every status class, decisions
with a step's timing), ANALYZEs, then times each figure of jobwarden.metrics.SQL_FIGURES
and the whole collection (the collector's cache off). Prints p50/max in ms. A benchmark
prints figures; no test times anything.

    .venv/bin/python scripts/bench_metrics.py --rows 100000 --events-per-operation 10
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

# Event n of operation i: a status answer (2xx mostly, some 429, 5xx and no answer), and
# every third a decision carrying a step's timing.
EVENTS = """
INSERT INTO operation_events (operation_id, seq, actor, at, kind, http_status, excerpt,
    prev_hash, hash, operation_created_at)
SELECT md5('op' || i)::uuid, n, 'worker',
    timestamptz '2026-01-01 00:00+00' + (i * interval '2 seconds') + (n * interval '1 second'),
    CASE WHEN n % 3 = 0 THEN 'decision' ELSE 'polled' END,
    CASE WHEN n % 3 = 0 THEN NULL WHEN (i + n) % 50 = 1 THEN 429
         WHEN (i + n) % 70 = 2 THEN 503 WHEN (i + n) % 90 = 3 THEN NULL ELSE 200 END,
    CASE WHEN n % 3 = 0 THEN jsonb_build_object('step', 'poll', 'step_seconds', (n % 7) / 100.0)
         WHEN (i + n) % 90 = 3 THEN '{"transport_failure": "read_timeout"}'::jsonb
         ELSE '{"request": 1, "of": 10}'::jsonb END,
    md5('p' || i || ':' || n) || md5('q' || i || ':' || n),
    md5('h' || i || ':' || n) || md5('g' || i || ':' || n),
    o.created_at
FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS i
JOIN operations o ON o.operation_id = md5('op' || i)::uuid,
     generate_series(1, CAST(:per AS int)) AS n
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--events-per-operation", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=20_000)
    parser.add_argument(
        "--admin-url",
        default=os.environ.get(
            "JOBWARDEN_TEST_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
        help="a Postgres URL allowed to CREATE DATABASE (env JOBWARDEN_TEST_ADMIN_URL)",
    )
    args = parser.parse_args()

    from bench_queries import FILL
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"jobwarden_bench_metrics_{secrets.token_hex(4)}"
    admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    url = make_url(args.admin_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        os.environ["JOBWARDEN_DATABASE_URL"] = url
        from jobwarden.metrics import SQL_FIGURES, Scrape, collect_families
        from jobwarden.models.persistence.db import dispose_all, engine_for, snapshot
        from jobwarden.models.persistence.migrate import upgrade

        upgrade(url)
        engine = engine_for(url)
        started = time.perf_counter()
        with engine.begin() as conn:
            for first in range(0, args.rows, args.chunk):
                last = min(args.rows, first + args.chunk) - 1
                conn.execute(text(FILL), {"first": first, "last": last})
                conn.execute(
                    text(EVENTS), {"first": first, "last": last, "per": args.events_per_operation}
                )
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
        events = args.rows * args.events_per_operation
        print(
            f"filled {args.rows:,} operations, {events:,} events "
            f"in {time.perf_counter() - started:.1f} s"
        )
        now = datetime.now(UTC)
        print(f"{'figure':<28} {'p50 ms':>9} {'max ms':>9}")
        for figure in SQL_FIGURES:
            samples = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                with snapshot(url) as session:
                    list(figure(Scrape(session=session, now=now, event_window=100_000)))
                samples.append((time.perf_counter() - t0) * 1000)
            print(f"{figure.__name__:<28} {statistics.median(samples):>9.1f} {max(samples):>9.1f}")
        samples = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            collect_families(url, now)
            samples.append((time.perf_counter() - t0) * 1000)
        whole = "one scrape (all figures)"
        print(f"{whole:<28} {statistics.median(samples):>9.1f} {max(samples):>9.1f}")
        dispose_all()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
