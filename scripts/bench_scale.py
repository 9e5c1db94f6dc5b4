"""Cost of one poll at scale: scripts/bench_poll.py on 10,000 operations and on a million.

Issue 23: polls/s with a million operations (a tenth active, the rest ended) and fifty
million events must stay >= 0.9 x polls/s with 10,000. Two runs of bench_poll's
workers mode (jobwarden's real Celery workers beside the hand-written floor, alternating
rounds, with a redis-server of the run's own so its CPU is the benchmark's), each on a
scratch database preloaded with filler rows by COPY (scripts/_scale_preload.py says how
they look and how they are loaded):

1. ``--baseline-operations`` (10,000) operations, a tenth active, with as many events per
   operation as the large run;
2. ``--operations`` (1,000,000), ``--active`` of them active (default a tenth), and
   ``--events`` (50,000,000) events.

The active filler operations wait a year ahead, so nothing claims them; the benchmark's
own operations are created after the preload and polled as bench_poll does. For each
size it prints the preload's time and the database size, polls/s, worker, Postgres and
Redis CPU per poll and the HOT ratio per table, then the ratios large / baseline (raw,
and against the floor, whose tables stay small: the floor's ratio says how much the
machine's load moved between the two runs), a capacity table (active operations one core
keeps polled at 10 s, 30 s and 300 s intervals, from the large run's CPU per poll) and
EXPLAIN (ANALYZE, BUFFERS, WAL) of the poll's two statements at each size.

At full size the preload writes about 25 GB and takes a while on two cores; scale down
with --operations/--events while trying it out. Linux only (/proc).

    .venv/bin/python scripts/bench_scale.py --operations 100000 --events 1000000
"""

from __future__ import annotations

import argparse
import pickle
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

# A size's shape, preload, poll figures and EXPLAIN lines.
Measured = tuple[Shape, Loaded, Summary, list[str]]
INTERVALS = (10, 30, 300)  # poll intervals of the capacity table, seconds
# What a poll that waits writes to the operations row and its timer (models/effects.py):
# the EXPLAIN below replays that write on one of the benchmark's operations.
POLL_COLUMNS = (
    "status_requests_used",
    "reserved_request",
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
                "SELECT o.*, t.next_poll_at, t.dispatched_at FROM operations o"
                " LEFT JOIN operation_timers t USING (operation_id) WHERE operation_id = %s",
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


def _run_here(label: str, shape: Shape, args: argparse.Namespace) -> Measured:
    """One size, in this process (a --one-size child: see main)."""
    loaded: list[Loaded] = []
    plans: dict[str, list[str]] = {}

    def prepare(database_url: str) -> None:
        print(
            f"\n== {label}: preloading {shape.operations:,} operations"
            f" ({shape.active:,} active) and {shape.events:,} events",
            flush=True,
        )
        done = preload(_dsn(database_url), shape, log=lambda line: print(line, flush=True))
        loaded.append(done)
        print(
            f"  preload took {done.seconds:.0f} s (COPY {done.seconds_copy:.0f} s, indexes"
            f" {done.seconds_indexes:.0f} s, VACUUM ANALYZE and CHECKPOINT"
            f" {done.seconds_vacuum:.0f} s); database {done.database_bytes / 2**30:.2f} GiB",
            flush=True,
        )

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
    summary = run_workers(poll_args, prepare, _explain(label, plans))
    return shape, loaded[0], summary, plans[label]


def _run(label: str, shape: Shape, args: argparse.Namespace) -> Measured:
    """One size in a child process: the Celery app and the settings read the run's key
    prefix, queue and Redis once per process, at import."""
    with tempfile.NamedTemporaryFile(prefix="jobwarden-bench-scale-", suffix=".pickle") as out:
        command = [sys.executable, __file__, *sys.argv[1:], "--one-size", label, out.name]
        subprocess.run(command, check=True)
        with open(out.name, "rb") as figures:
            measured: Measured = pickle.load(figures)  # our own child's file
    return measured


def _cpu_ms(s: Summary) -> float:
    return s.worker_ms["jobwarden"] + s.pg_ms["jobwarden"] + (s.redis_ms or {}).get("jobwarden", 0)


def _report(runs: dict[str, Measured]) -> bool:
    (small_label, (_, _, small, _)), (large_label, (large_shape, _, large, _)) = runs.items()
    print("\n== scale: jobwarden's polls at both sizes (medians of the measured rounds)")
    print(
        f"  {'size':<34}{'polls/s':>9}{'worker':>9}{'Postgres':>10}{'Redis':>8}"
        f"{'together':>10}{'vs floor':>10}   HOT ratio (operations, timers)"
    )
    for label, (_, loaded, s, _) in runs.items():
        hot = s.hot["jobwarden"]
        ratios = "  ".join(
            f"{h / n:.2f}" if n else "-"
            for n, h in (hot.get("operations", (0, 0)), hot.get("operation_timers", (0, 0)))
        )
        print(
            f"  {label:<34}{s.rate['jobwarden']:9.1f}{s.worker_ms['jobwarden']:9.2f}"
            f"{s.pg_ms['jobwarden']:10.2f}{(s.redis_ms or {}).get('jobwarden', 0):8.2f}"
            f"{_cpu_ms(s):10.2f}{s.paired_rate:10.2f}   {ratios}"
        )
        print(f"  {'':<34}(ms of CPU per poll; database {loaded.database_bytes / 2**30:.2f} GiB)")
    raw = large.rate["jobwarden"] / small.rate["jobwarden"]
    paired = large.paired_rate / small.paired_rate
    pg = large.pg_ms["jobwarden"] / max(small.pg_ms["jobwarden"], 1e-9)
    met = raw >= 0.9
    print(
        f"  {large_label} / {small_label}: polls/s {raw:.2f}"
        f" ({'met' if met else 'MISSED'}: target >= 0.9), against the floor {paired:.2f},"
        f" Postgres CPU per poll {pg:.2f}, all CPU per poll"
        f" {_cpu_ms(large) / _cpu_ms(small):.2f}"
    )
    cpu = _cpu_ms(large) / 1000
    print(
        f"\n== capacity at {large_shape.operations:,} operations: active operations one core"
        f" keeps polled ({1000 * cpu:.2f} ms of CPU per poll: worker + Postgres + Redis)"
    )
    for interval in INTERVALS:
        print(f"  every {interval:>3} s: {interval / cpu:>10,.0f} per core")
    for label, (*_, lines) in runs.items():
        print(f"\n== EXPLAIN of a poll's statements, {label}")
        print("\n".join(lines))
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=1_000_000, help="large run's")
    parser.add_argument("--active", type=int, default=None, help="default: a tenth")
    parser.add_argument("--events", type=int, default=50_000_000, help="large run's")
    parser.add_argument("--baseline-operations", type=int, default=10_000)
    parser.add_argument("--poll-operations", type=int, default=20, help="polled per round")
    parser.add_argument("--polls", type=int, default=25, help="polls per operation per round")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per system")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes each")
    parser.add_argument(
        "--loglevel", default="INFO", help="the workers' (INFO: readiness is read from it)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per round")
    parser.add_argument("--one-size", nargs=2, metavar=("LABEL", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
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
    if args.one_size:
        label, out = args.one_size
        measured = _run_here(label, shapes[label], args)
        Path(out).write_bytes(pickle.dumps(measured))
        return 0
    started = time.perf_counter()
    runs = {label: _run(label, shape, args) for label, shape in shapes.items()}
    met = _report(runs)
    print(f"\nwhole run {time.perf_counter() - started:.0f} s")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
