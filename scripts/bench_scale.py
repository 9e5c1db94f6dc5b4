"""Cost of one poll at scale: scripts/bench_poll.py on 10,000 operations and on a million.

Issue 23: polls/s with a million operations (a tenth active, the rest ended) and fifty
million events must stay >= 0.9 x polls/s with 10,000. Two scratch databases are
preloaded with filler rows by COPY (scripts/_scale_preload.py says how they look and
how they are loaded):

1. ``--baseline-operations`` (10,000) operations, a tenth active, with as many events per
   operation as the large one;
2. ``--operations`` (1,000,000), ``--active`` of them active (default a tenth), and
   ``--events`` (50,000,000) events.

The active filler operations wait a year ahead, so nothing claims them. Then bench_poll's
workers mode (jobwarden's real Celery workers beside the hand-written floor, in
alternating rounds, with a redis-server of the run's own so its CPU is the benchmark's)
runs ``--pairs`` times on each database, small and large alternately, each run in a child
process on the kept database with operations of its own. Alternating runs share the
machine's load: on a busy machine a size's figures drift by more than the 10 % to be
resolved, so each large run is compared with the small run just before it.

It prints the preload's time and the database size; per run bench_poll's report; per
size the medians of polls/s, worker, Postgres and Redis CPU per poll and the HOT ratio;
per pair and as their median the ratios large / small (raw, and against the floor,
whose tables stay small); a capacity table (active operations one core keeps polled at
10 s, 30 s and 300 s intervals, from the large runs' CPU per poll); and EXPLAIN
(ANALYZE, BUFFERS, WAL) of a poll's two statements at each size. The databases are
dropped at the end.

At full size the preload writes about 23 GiB (14 minutes on the 2-core development VM);
scale down with --operations/--events while trying it out. Linux only (/proc).

    .venv/bin/python scripts/bench_scale.py --operations 100000 --events 1000000
"""

from __future__ import annotations

import argparse
import pickle
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

from _scale_preload import Loaded, Shape, preload  # noqa: E402 - after the path set-up
from bench_poll import Summary, run_workers  # noqa: E402

# One run's poll figures and (on the last run) EXPLAIN lines.
Measured = tuple[Summary, list[str]]
INTERVALS = (10, 30, 300)  # poll intervals of the capacity table, seconds
# About what a poll that waits writes to the operations row and its timer (the workers'
# statement names a few more counters): the EXPLAIN below replays a write of that shape,
# with the row's own values, on one of the benchmark's operations.
POLL_COLUMNS = (
    "status_requests_used",
    "reserved_request",
    "transport_failures_used",
    "poll_attempt",
    "last_remote_state",
    "last_http_status",
    "consecutive_rate_limited",
    "event_count",
    "last_event_hash",
    "updated_at",
    "version",
    "next_poll_at",
    "dispatched_at",
)


def _dsn(database_url: str) -> str:
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    return f"host={url.host} port={url.port or 5432} user={url.username} dbname={url.database}"


def _explain(label: str, plans: dict[str, list[str]]) -> Callable[[str, list[str]], None]:
    """EXPLAIN (ANALYZE, BUFFERS, WAL) of the poll's load and fenced write on one of the
    benchmark's operations, each run in a transaction that is rolled back."""

    def inspect(database_url: str, operations: list[str]) -> None:
        import psycopg
        from psycopg.rows import dict_row

        from jobwarden.models.persistence import store

        op_id = uuid.UUID(operations[-1])
        out: list[str] = []
        with psycopg.connect(_dsn(database_url), row_factory=dict_row) as conn:
            row = conn.execute(
                "SELECT o.*, t.* FROM operations o"
                " JOIN operation_timers t USING (operation_id) WHERE operation_id = %s",
                (op_id,),
            ).fetchone()
            last = conn.execute(
                "SELECT * FROM operation_events WHERE operation_id = %s ORDER BY seq DESC LIMIT 1",
                (op_id,),
            ).fetchone()
            conn.rollback()
            assert row is not None and last is not None
            columns = tuple(c for c in POLL_COLUMNS if c in row)
            values = {c: row[c] for c in columns} | {
                "version": row["version"] + 1,
                "event_count": row["event_count"] + 1,
                "updated_at": datetime.now(UTC),
                "next_poll_at": datetime.now(UTC) + timedelta(hours=1),
                "dispatched_at": None,
            }
            params: dict[str, Any] = {f"set_{c}": store._bound(c, v) for c, v in values.items()}
            params |= {"fenced_id": op_id, "fenced_version": row["version"]}
            event = {**last, "seq": last["seq"] + 1, "at": datetime.now(UTC)}
            params |= {f"e0_{c}": store._bound(c, event[c]) for c in store._EVENT_CASTS}
            statements = {
                "load (store.load)": (store._LOAD_ONE, {"operation_id": op_id}),
                "fenced write (store.fenced_update, one event)": (
                    store._fenced_sql(columns, 1),
                    params,
                ),
            }
            for name, (sql, bound) in statements.items():
                # Five times, the last one printed: caches warm, as on a worker's connection.
                for _ in range(5):
                    plan = conn.execute(
                        "EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF) " + sql, bound
                    ).fetchall()
                    conn.rollback()
                out.append(f"  {name}:")
                out += [f"    {r['QUERY PLAN']}" for r in plan]
        plans[label] = out

    return inspect


def _preload(label: str, shape: Shape, database: str) -> Loaded:
    """Create and migrate ``database``, then fill it (scripts/_scale_preload.py)."""
    from jobwarden.models.persistence.migrate import ensure_database, upgrade

    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
    ensure_database(url)
    upgrade(url)
    print(
        f"\n== {label}: preloading {shape.operations:,} operations"
        f" ({shape.active:,} active) and {shape.events:,} events",
        flush=True,
    )
    done = preload(_dsn(url), shape, log=lambda line: print(line, flush=True))
    print(
        f"  preload took {done.seconds:.0f} s (COPY {done.seconds_copy:.0f} s, indexes"
        f" {done.seconds_indexes:.0f} s, VACUUM ANALYZE and CHECKPOINT"
        f" {done.seconds_vacuum:.0f} s); database {done.database_bytes / 2**30:.2f} GiB",
        flush=True,
    )
    return done


def _run_here(label: str, database: str, explain: bool, args: argparse.Namespace) -> Measured:
    """One bench_poll run on a preloaded database, in this process (a child: see _run)."""
    plans: dict[str, list[str]] = {}
    poll_args = argparse.Namespace(
        operations=args.poll_operations,
        polls=args.polls,
        rounds=args.rounds,
        concurrency=args.concurrency,
        loglevel=args.loglevel,
        timeout=args.timeout,
        profile=None,
        private_redis=True,
    )
    inspect = _explain(label, plans) if explain else None
    summary = run_workers(poll_args, inspect=inspect, database=database)
    return summary, plans.get(label, [])


def _run(label: str, database: str, explain: bool) -> Measured:
    """One bench_poll run in a child process: the Celery app and the settings read the
    run's key prefix, queue and Redis once per process, at import."""
    with tempfile.NamedTemporaryFile(prefix="jobwarden-bench-scale-", suffix=".pickle") as out:
        child = ["--one-size", label, database, out.name] + (["--explain"] if explain else [])
        subprocess.run([sys.executable, __file__, *sys.argv[1:], *child], check=True)
        with open(out.name, "rb") as figures:
            measured: Measured = pickle.load(figures)  # our own child's file
    return measured


def _cpu_ms(s: Summary) -> float:
    return s.worker_ms["jobwarden"] + s.pg_ms["jobwarden"] + (s.redis_ms or {}).get("jobwarden", 0)


def _ratio(a: float, b: float) -> float:
    # A tiny run can measure no CPU at all (the kernel counts in 10 ms ticks).
    return a / b if b else float("nan")


def _median(summaries: list[Summary], figure: Callable[[Summary], float]) -> float:
    return statistics.median(figure(s) for s in summaries)


def _report(sizes: dict[str, tuple[Shape, Loaded]], runs: dict[str, list[Measured]]) -> bool:
    """Medians per size over its runs, and the large / small ratios of each pair of runs."""
    (small_label, large_label) = sizes
    by_size = {label: [summary for summary, _ in measured] for label, measured in runs.items()}
    print(
        f"\n== scale: jobwarden's polls at both sizes (medians over {len(by_size[small_label])}"
        " runs each, run alternately; CPU in ms per poll)"
    )
    print(
        f"  {'size':<34}{'polls/s':>9}{'worker':>9}{'Postgres':>10}{'Redis':>8}"
        f"{'together':>10}{'vs floor':>10}   HOT ratio (operations, timers)"
    )
    for label, summaries in by_size.items():
        hot = [
            tuple(
                map(sum, zip(*(s.hot["jobwarden"].get(t, (0, 0)) for s in summaries), strict=True))
            )
            for t in ("operations", "operation_timers")
        ]
        ratios = "  ".join(f"{h / n:.2f}" if n else "-" for n, h in hot)
        print(
            f"  {label:<34}{_median(summaries, lambda s: s.rate['jobwarden']):9.1f}"
            f"{_median(summaries, lambda s: s.worker_ms['jobwarden']):9.2f}"
            f"{_median(summaries, lambda s: s.pg_ms['jobwarden']):10.2f}"
            f"{_median(summaries, lambda s: (s.redis_ms or {}).get('jobwarden', 0)):8.2f}"
            f"{_median(summaries, _cpu_ms):10.2f}"
            f"{_median(summaries, lambda s: s.paired_rate):10.2f}   {ratios}"
        )
        print(f"  {'':<34}(database {sizes[label][1].database_bytes / 2**30:.2f} GiB)")
    pairs = list(zip(by_size[small_label], by_size[large_label], strict=True))
    print(f"  {large_label} / {small_label}, run by run:")
    for n, (small, large) in enumerate(pairs, 1):
        print(
            f"    pair {n}: polls/s {_ratio(large.rate['jobwarden'], small.rate['jobwarden']):.2f},"
            f" against the floor {_ratio(large.paired_rate, small.paired_rate):.2f},"
            f" Postgres CPU {_ratio(large.pg_ms['jobwarden'], small.pg_ms['jobwarden']):.2f},"
            f" all CPU {_ratio(_cpu_ms(large), _cpu_ms(small)):.2f}"
        )
    raw = statistics.median(_ratio(b.rate["jobwarden"], a.rate["jobwarden"]) for a, b in pairs)
    paired = statistics.median(_ratio(b.paired_rate, a.paired_rate) for a, b in pairs)
    pg = statistics.median(_ratio(b.pg_ms["jobwarden"], a.pg_ms["jobwarden"]) for a, b in pairs)
    every = statistics.median(_ratio(_cpu_ms(b), _cpu_ms(a)) for a, b in pairs)
    met = raw >= 0.9
    print(
        f"  median of the pairs: polls/s {raw:.2f} ({'met' if met else 'MISSED'}: target"
        f" >= 0.9), against the floor {paired:.2f}, Postgres CPU per poll {pg:.2f},"
        f" all CPU per poll {every:.2f}"
    )
    large_shape = sizes[large_label][0]
    cpu = _median(by_size[large_label], _cpu_ms) / 1000
    print(
        f"\n== capacity at {large_shape.operations:,} operations: active operations one core"
        f" keeps polled ({1000 * cpu:.2f} ms of CPU per poll: worker + Postgres + Redis)"
    )
    for interval in INTERVALS:
        print(f"  every {interval:>3} s: {_ratio(interval, cpu):>10,.0f} per core")
    for label, measured in runs.items():
        print(f"\n== EXPLAIN of a poll's statements, {label} (the last run)")
        print("\n".join(measured[-1][1]))
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=1_000_000, help="large run's")
    parser.add_argument("--active", type=int, default=None, help="default: a tenth")
    parser.add_argument("--events", type=int, default=50_000_000, help="large run's")
    parser.add_argument("--baseline-operations", type=int, default=10_000)
    parser.add_argument("--pairs", type=int, default=3, help="runs per size, alternating")
    parser.add_argument("--poll-operations", type=int, default=20, help="polled per round")
    parser.add_argument("--polls", type=int, default=25, help="polls per operation per round")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per run")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes each")
    parser.add_argument(
        "--loglevel", default="INFO", help="the workers' (INFO: readiness is read from it)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per round")
    parser.add_argument("--one-size", nargs=3, help=argparse.SUPPRESS)  # LABEL DATABASE OUT
    parser.add_argument("--explain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_size:
        label, database, out = args.one_size
        Path(out).write_bytes(pickle.dumps(_run_here(label, database, args.explain, args)))
        return 0
    if args.operations < args.baseline_operations or args.events < args.operations:
        raise SystemExit(
            "--operations must be at least --baseline-operations, --events at least --operations"
        )
    active = args.operations // 10 if args.active is None else args.active
    per_op = args.events / args.operations
    shapes = {
        f"{args.baseline_operations:,} operations": Shape(
            args.baseline_operations,
            round(args.baseline_operations * active / args.operations),
            round(args.baseline_operations * per_op),
        ),
        f"{args.operations:,} operations": Shape(args.operations, active, args.events),
    }
    run = secrets.token_hex(3)
    databases = {label: f"jobwarden_bench_scale_{run}_{n}" for n, label in enumerate(shapes)}
    started = time.perf_counter()
    try:
        sizes = {
            label: (shape, _preload(label, shape, databases[label]))
            for label, shape in shapes.items()
        }
        runs: dict[str, list[Measured]] = {label: [] for label in shapes}
        for pair in range(args.pairs):
            for label in shapes:
                print(f"\n== {label}, run {pair + 1} of {args.pairs}", flush=True)
                runs[label].append(_run(label, databases[label], pair == args.pairs - 1))
        met = _report(sizes, runs)
    finally:
        import psycopg

        with psycopg.connect(
            _dsn("postgresql://postgres@127.0.0.1/postgres"), autocommit=True
        ) as admin:
            for database in databases.values():
                admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    print(f"\nwhole run {time.perf_counter() - started:.0f} s")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
