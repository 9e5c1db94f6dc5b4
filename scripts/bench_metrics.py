"""What one /metrics scrape costs the database as the history grows, at a fixed load.

Creates a scratch database of its own (dropped at the end, whatever happens, unless
``--keep``), applies the migrations, then grows the history to each of ``--sizes``
operations (scripts/bench_queries.py's fill, ``--events-per-operation`` events each:
provider answers of every status class, decisions with a step's timing). The work in
flight stays fixed as the history grows: the first ``--in-flight`` operations keep the
fill's mix of states (observing, stopped, awaiting approval ...), every later one has
ended (succeeded or failed), as a long-running service's history looks. After each size
it folds the counters' deltas (as beat does every 15 s), ANALYZEs and times each figure
of jobwarden.observability.metrics.SQL_FIGURES and the whole collection (the collector's cache off),
p50/max in ms; last, the ratio of the largest
size's whole scrape to the smallest's (flat history cost: near 1). ``--write-cost N``
also times N poll writes per round with the counters' triggers on and off. A benchmark
prints figures; no test times anything.

    .venv/bin/python scripts/bench_metrics.py --sizes 10000 100000 --events-per-operation 10
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

# The fill writes events behind the store's back, so it appends their provider-answer
# deltas itself, as the statement that records answers does since 0028 (answer_tallies.py).
ANSWER_DELTAS = """
INSERT INTO provider_answer_deltas (provider, status_class, answers)
SELECT o.provider,
    CASE WHEN e.http_status IS NULL THEN 'none' WHEN e.http_status = 429 THEN '429'
         ELSE (e.http_status / 100)::text || 'xx' END,
    count(*)
FROM operation_events e JOIN operations o USING (operation_id)
WHERE o.operation_id IN (
    SELECT md5('op' || i)::uuid
    FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS i)
  AND (e.http_status IS NOT NULL OR e.excerpt ? 'transport_failure')
GROUP BY 1, 2
"""

# Operations past the in-flight ones have ended, the way the fill's own mix ends most.
ENDED = """
UPDATE operations SET state = CASE WHEN state = 'failed' THEN 'failed' ELSE 'succeeded' END,
    escalation_reason = NULL
WHERE operation_id IN (
    SELECT md5('op' || i)::uuid
    FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS i)
  AND state NOT IN ('succeeded', 'failed')
"""


def _time_scrapes(url: str, repeat: int) -> float:
    """Print each figure's p50/max and return the whole scrape's p50 (ms)."""
    from jobwarden.models.persistence.metrics_store import scrape_session
    from jobwarden.observability.metrics import SQL_FIGURES, Scrape, collect_families

    now = datetime.now(UTC)
    print(f"  {'figure':<28} {'p50 ms':>9} {'max ms':>9}")
    for figure in SQL_FIGURES:
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            with scrape_session(url) as session:
                list(figure(Scrape(session=session, now=now, event_window=100_000)))
            samples.append((time.perf_counter() - t0) * 1000)
        print(f"  {figure.__name__:<28} {statistics.median(samples):>9.1f} {max(samples):>9.1f}")
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        collect_families(url, now)
        samples.append((time.perf_counter() - t0) * 1000)
    whole = "one scrape (all figures)"
    print(f"  {whole:<28} {statistics.median(samples):>9.1f} {max(samples):>9.1f}")
    return statistics.median(samples)


def _write_cost(url: str, writes: int) -> None:
    """A poll's write (one answer event, the request counter) with the ended tally trigger on
    and off, in alternating rounds; per write, the fenced statement alone."""
    from sqlalchemy import text

    from jobwarden.models.history.chain import EventDraft, EventKind
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import engine_for, step_session

    with engine_for(url).begin() as conn:
        # The fill leaves event_count at 1; a write chains after the last event.
        conn.execute(
            text(
                "UPDATE operation_timers t SET event_count ="
                " (SELECT max(seq) FROM operation_events e WHERE e.operation_id = t.operation_id)"
                " WHERE t.operation_id IN"
                " (SELECT operation_id FROM operations WHERE state = 'observing')"
            )
        )
        ids = list(
            conn.scalars(text("SELECT operation_id FROM operations WHERE state = 'observing'"))
        )
    # The provider-answer tally is a CTE of the write itself since 0028 (no trigger to
    # turn off): "off" leaves only the ended-operations trigger out.
    toggles = ("ALTER TABLE operations {} TRIGGER tally_ended_operations_updated",)
    costs: dict[str, list[float]] = {"on": [], "off": []}
    for round_ in range(10):
        arm = "on" if round_ % 2 == 0 else "off"
        with engine_for(url).begin() as conn:
            for toggle in toggles:
                conn.execute(text(toggle.format("ENABLE" if arm == "on" else "DISABLE")))
        spent = 0.0
        for n in range(writes):
            at = datetime.now(UTC)
            with step_session(url) as session:
                op = store.load(session, ids[n % len(ids)])
                assert op is not None
                answer = EventDraft(kind=EventKind.polled, actor="bench", at=at, http_status=200)
                t0 = time.perf_counter()
                store.fenced_update(
                    session,
                    op,
                    changes={"status_requests_used": op.status_requests_used + 1},
                    drafts=[answer],
                    now=at,
                )
                spent += time.perf_counter() - t0
        costs[arm].append(spent / writes * 1000)
    with engine_for(url).begin() as conn:
        for toggle in toggles:
            conn.execute(text(toggle.format("ENABLE")))
    on, off = statistics.median(costs["on"]), statistics.median(costs["off"])
    print(
        f"a poll's write, {writes} per round, median of 5 rounds each: {on:.3f} ms with the "
        f"ended-operations trigger, {off:.3f} ms without ({(on / off - 1) * 100:+.0f} %)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--in-flight", type=int, default=10_000)
    parser.add_argument("--events-per-operation", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=20_000)
    parser.add_argument(
        "--write-cost", type=int, default=0, help="also time N poll writes, triggers on/off"
    )
    parser.add_argument("--keep", action="store_true", help="keep the database, print its URL")
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
        from jobwarden.models.persistence.db import dispose_all, engine_for
        from jobwarden.models.persistence.migrate import upgrade

        upgrade(url)
        engine = engine_for(url)
        scrapes: dict[int, float] = {}
        filled = 0
        for size in sorted(args.sizes):
            started = time.perf_counter()
            with engine.begin() as conn:
                for first in range(filled, size, args.chunk):
                    last = min(size, first + args.chunk) - 1
                    params = {"first": first, "last": last}
                    conn.execute(text(FILL), params)
                    conn.execute(text(EVENTS), {**params, "per": args.events_per_operation})
                    conn.execute(text(ANSWER_DELTAS), params)
                    if last >= args.in_flight:
                        conn.execute(
                            text(ENDED), {"first": max(first, args.in_flight), "last": last}
                        )
            filled = size
            # As beat's jobwarden.fold_tallies does every 15 s: the fill's deltas into totals.
            with engine.begin() as conn:
                from sqlalchemy.orm import Session

                from jobwarden.models.persistence.metrics_store import fold_tallies

                fold_tallies(Session(bind=conn))
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE"))
                active = conn.scalar(
                    text(
                        "SELECT count(*) FROM operations WHERE state NOT IN ('succeeded', 'failed')"
                    )
                )
            events = size * args.events_per_operation
            print(
                f"history: {size:,} operations ({active:,} not ended), {events:,} events "
                f"(filled in {time.perf_counter() - started:.1f} s)"
            )
            scrapes[events] = _time_scrapes(url, args.repeat)
        smallest, largest = min(scrapes), max(scrapes)
        print(
            f"whole scrape p50: {scrapes[smallest]:.1f} ms at {smallest:,} events, "
            f"{scrapes[largest]:.1f} ms at {largest:,} events: ratio "
            f"{scrapes[largest] / scrapes[smallest]:.2f} for {largest / smallest:.0f}x the history"
        )
        if args.write_cost:
            _write_cost(url, args.write_cost)
        dispose_all()
    finally:
        if args.keep:
            print(f"kept: {url}")
        else:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
