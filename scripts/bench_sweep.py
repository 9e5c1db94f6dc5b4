"""Sweeper throughput and worker memory with many parked operations (issue 12, item 5).

Parks --parked operations (default 100,000) in a scratch database of its own, as copies
of one operation submitted through the real intake, then:

1. worker RSS: a real Celery worker (prefork, 2 children) and a beat sweeping every
   second run with 100 and then with --parked operations parked (not yet due); the
   resident memory of the worker's processes is read from /proc after a few sweeps.
   Parking lives in Postgres, so the figure should not move.
2. wake-up rate: --due of the parked rows are made due (next_poll_at in the past) and
   ``sweep_once`` (the beat task's body) claims and publishes them all; the script
   prints woken operations per second and checks the queue holds one message each.
   Target: >= 2,000/s. No worker consumes them (acceptance tests prove they run).

Redis keys live under a private prefix and queue; the database is dropped at the end.
Linux only (/proc).

    .venv/bin/python scripts/bench_sweep.py --parked 100000 --due 20000
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _rss_kb(pid: int) -> int:
    """Proportional set size (shared pages split between the forked children), else RSS."""
    rollup = Path(f"/proc/{pid}/smaps_rollup")
    field, path = ("Pss:", rollup) if rollup.exists() else ("VmRSS:", Path(f"/proc/{pid}/status"))
    for line in path.read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def _group_rss_mb(pgid: int) -> tuple[float, int]:
    """Summed memory (MB, PSS where readable) and count of a process group's processes."""
    total, count = 0, 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == pgid:
                total += _rss_kb(int(entry.name))
                count += 1
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            continue
    return total / 1024, count


def _clone(database_url: str, prototype: str, count: int, due: bool) -> None:
    """Insert `count` copies of the prototype row, each with its own identity, parked for
    a day (or due an hour ago). No events: the sweeper reads operations only."""
    from sqlalchemy import text

    from jobwarden.models.persistence.db import transaction

    with transaction(database_url) as session:
        columns = session.scalars(
            text(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'operations' ORDER BY ordinal_position"
            )
        ).all()
        override = {
            "operation_id": "gen_random_uuid()",
            "idempotency_key": "idempotency_key || '-' || :tag || '-' || g",
            "provider_token": "provider_token || '-' || :tag || '-' || g",
        }
        names = ", ".join(columns)
        values = ", ".join(override.get(c, c) for c in columns)
        timer = "now() - interval '1 hour'" if due else "now() + interval '1 day'"
        # The hot row's columns other than the timer (0033), copied from the prototype's.
        hot = [
            c
            for (c,) in session.execute(
                text(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_name = 'operation_timers' AND column_name NOT IN "
                    "('operation_id', 'next_poll_at', 'dispatched_at') ORDER BY ordinal_position"
                )
            ).all()
        ]
        hot_names = "".join(f", {c}" for c in hot)
        hot_values = "".join(f", p.{c}" for c in hot)
        # Each copy with its hot row (operation_timers, 0021 and 0033), in the same statement.
        session.execute(
            text(
                f"WITH copies AS (INSERT INTO operations ({names}) SELECT {values} "
                "FROM operations, generate_series(1, :n) AS g WHERE operation_id = :proto "
                "RETURNING operation_id) "
                "INSERT INTO operation_timers (operation_id, next_poll_at, dispatched_at"
                f"{hot_names}) "
                f"SELECT c.operation_id, {timer}, NULL{hot_values} FROM copies c "
                "JOIN operation_timers p ON p.operation_id = :proto"
            ),
            {"n": count, "proto": prototype, "tag": secrets.token_hex(4)},
        )


def _measure_worker(env: dict[str, str], parked: int, settle: float) -> tuple[float, int, int]:
    """Worker RSS (MB, processes) after `settle` seconds of sweeps; and sweeps seen."""
    from jobwarden.demo.harness import Stack

    stack = Stack(env)
    try:
        worker = stack.start_worker("bench", concurrency=2)
        stack.start_beat()
        stack.wait_ready("bench")
        time.sleep(settle)  # a benchmark's settling time, not a synchronisation
        rss, procs = _group_rss_mb(worker.pid)
        sweeps = sum(
            p.read_text(errors="replace").count("jobwarden.sweep[")
            for p in stack.log_dir.glob("bench*.log")
        )
    finally:
        stack.stop()
    print(
        f"  parked {parked:>7,}: worker memory {rss:7.1f} MB over {procs} processes"
        f" ({sweeps} sweep lines)"
    )
    return rss, procs, sweeps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parked", type=int, default=100_000, help="operations parked")
    parser.add_argument("--due", type=int, default=20_000, help="of them made due and woken")
    parser.add_argument("--batch", type=int, default=None, help="JOBWARDEN_SWEEP_BATCH_SIZE")
    parser.add_argument("--settle", type=float, default=6.0, help="seconds of idle sweeps")
    parser.add_argument("--skip-rss", action="store_true", help="only the wake-up rate")
    args = parser.parse_args()
    if args.parked < 100 or not 0 < args.due <= args.parked:
        parser.error("--parked must be >= 100 and 0 < --due <= --parked")

    run = secrets.token_hex(3)
    database = f"jobwarden_bench_sweep_{run}"
    env = {
        "JOBWARDEN_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}",
        "JOBWARDEN_KEY_PREFIX": f"jwbench-{run}",
        "JOBWARDEN_QUEUE": f"jwbench-{run}",
        "JOBWARDEN_SANDBOX_TOKEN": secrets.token_hex(8),
        "JOBWARDEN_SWEEP_INTERVAL_SECONDS": "1",
    }
    if args.batch:
        env["JOBWARDEN_SWEEP_BATCH_SIZE"] = str(args.batch)
    os.environ.update(env)

    from sqlalchemy import create_engine, text

    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import ensure_database, upgrade

    settings = get_settings()
    ensure_database(settings.database_url)
    try:
        upgrade(settings.database_url)
        return _run(args, env, settings)
    finally:
        from jobwarden.tasks.runtime import current, reset

        redis = current().redis
        for key in redis.scan_iter(f"{settings.key_prefix}*"):
            redis.delete(key)
        reset()
        dispose_all()
        admin = create_engine(
            "postgresql+psycopg://postgres@127.0.0.1:5432/postgres", isolation_level="AUTOCOMMIT"
        )
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


def _run(args: argparse.Namespace, env: dict[str, str], settings: Any) -> int:
    from sqlalchemy import text

    from jobwarden.models.persistence.db import transaction
    from jobwarden.tasks.intake import submit_operation
    from jobwarden.tasks.pipeline import sweep_once
    from jobwarden.tasks.runtime import current

    rt = current()
    answer = submit_operation(
        tenant="bench",
        provider="sandbox",
        idempotency_key="bench-sweep-prototype",
        command={"kind": "bench", "behaviour": {}},
        requested_by="bench",
        runtime=rt,
    )
    prototype = str(answer.operation_id)
    queue_key = f"{settings.key_prefix}:celery:{settings.queue}"

    def park_prototype() -> None:
        # The prototype's own create message and row must not count as a wake-up.
        with transaction(settings.database_url) as session:
            session.execute(
                text(
                    "UPDATE operation_timers SET next_poll_at = now() + interval '1 day' "
                    "WHERE operation_id = :id"
                ),
                {"id": prototype},
            )
        rt.redis.delete(queue_key)

    park_prototype()
    rss = {}
    if not args.skip_rss:
        print("worker memory (PSS), a beat sweeping every second, nothing due:")
        _clone(settings.database_url, prototype, 100, due=False)
        rss[100] = _measure_worker(env, 100, args.settle)[0]
    t0 = time.perf_counter()
    _clone(settings.database_url, prototype, args.parked - 100, due=False)
    print(f"parked {args.parked:,} operations in {time.perf_counter() - t0:.1f} s")
    if not args.skip_rss:
        rss[args.parked] = _measure_worker(env, args.parked, args.settle)[0]
        change = rss[args.parked] - rss[100]
        print(f"  worker memory change 100 -> {args.parked:,} parked: {change:+.1f} MB")
    rt.redis.delete(queue_key)

    with transaction(settings.database_url) as session:
        session.execute(
            text(
                "UPDATE operation_timers SET next_poll_at = now() - interval '1 hour', "
                "dispatched_at = NULL WHERE operation_id IN "
                "(SELECT operation_id FROM operation_timers WHERE operation_id <> :proto LIMIT :n)"
            ),
            {"proto": prototype, "n": args.due},
        )
    print(f"wake-up rate: {args.due:,} of them due, batch {settings.sweep_batch_size}:")
    start = time.perf_counter()
    woken = sweep_once(rt, budget_seconds=3600.0)
    elapsed = time.perf_counter() - start
    queued = int(rt.redis.llen(queue_key))
    rate = woken / elapsed
    print(
        f"  woke {woken:,} in {elapsed:.2f} s: {rate:,.0f} operations/s "
        f"({queued:,} messages queued)  target >= 2,000/s: {'ok' if rate >= 2000 else 'MISSED'}"
    )
    ok = woken == args.due == queued
    if not ok:
        print(f"  MISMATCH: claimed {woken}, due {args.due}, queued {queued}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
