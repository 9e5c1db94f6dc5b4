"""The schedules tick's cost with many schedules firing every minute (issue 22).

Declares --schedules schedules (default 1,000 and then 10,000) in a scratch database of
its own, each ``* * * * *`` (every minute, UTC), all with a slot due at the same minute,
then runs the beat task's body (``run_ticks``) once with the clock one second past
that minute, and prints for each size:

- the decide phase: claiming due schedules, planning their slots, inserting the slot
  rows and moving the timers (``tick_once`` without its submits);
- the submit phase: each slot through the one intake (its own transaction and a
  wake-up published to Redis), then its operation recorded on the slot;
- Postgres round trips (statements sent, plus BEGIN and COMMIT), CPU seconds of this
  process (time.process_time) and wall seconds, each per slot, and how they grow.

Every submit runs in this process here (JOBWARDEN_SCHEDULE_SUBMIT_CHUNK is raised), so
the figures are the whole work; a real tick spreads the submits of a large tick over
the workers (jobwarden.schedule_submit), dividing the submit phase's wall time.

No worker runs: the queue fills with one create message per slot, then is deleted.

    .venv/bin/python scripts/bench_schedules.py --sizes 1000 10000
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


@dataclass
class Counter:
    statements: int = 0
    transactions: int = 0

    @property
    def round_trips(self) -> int:
        return self.statements + 2 * self.transactions  # BEGIN and COMMIT/ROLLBACK


def _count(counter: Counter) -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def on_execute(*_: Any) -> None:
        counter.statements += 1

    def on_begin(*_: Any) -> None:
        counter.transactions += 1

    event.listen(Engine, "before_cursor_execute", on_execute)
    event.listen(Engine, "begin", on_begin)


def _declare(url: str, count: int, tag: str, now: datetime) -> None:
    """``count`` schedules in one INSERT … SELECT, each due at ``now`` (its next slot)."""
    from sqlalchemy import text

    from jobwarden.models.persistence.db import transaction

    with transaction(url) as session:
        session.execute(
            text(
                "INSERT INTO schedules (schedule_id, tenant, name, status, cron, timezone, "
                "jitter_seconds, provider, command, overlap, catchup_window_seconds, source, "
                "next_slot_at, next_due_at, created_at, updated_at, version) "
                "SELECT gen_random_uuid(), 'bench', :tag || '-' || g, 'active', '* * * * *', "
                '\'UTC\', 0, \'sandbox\', \'{"kind": "bench", "slot": "{slot}"}\'::jsonb, '
                "'allow_all', 900, 'bench', :at, :at, :at, :at, 1 "
                "FROM generate_series(1, :n) AS g"
            ),
            {"tag": tag, "n": count, "at": now},
        )


def _measure(rt: Any, counter: Counter, size: int, minute: datetime) -> dict[str, float]:
    from jobwarden.tasks import schedules as ticks

    clock = minute + timedelta(seconds=1)
    # Split the two phases: the decide phase alone (no submits), then the submits.
    real_submit = ticks.submit_pending
    submitted: list[set[Any]] = []

    def hold(rt_: Any, fresh: set[Any], *, stale_before: datetime) -> tuple[int, int]:
        submitted.append(fresh)
        return len(fresh), 0

    ticks.submit_pending = hold  # type: ignore[assignment]
    before = (counter.round_trips, time.process_time(), time.perf_counter())
    try:
        decided = ticks.run_ticks(rt, clock=lambda: clock, budget_seconds=3600.0)
    finally:
        ticks.submit_pending = real_submit
    mid = (counter.round_trips, time.process_time(), time.perf_counter())
    slots: set[Any] = set().union(*submitted)
    done, _ = real_submit(rt, slots, stale_before=clock - timedelta(days=365))
    after = (counter.round_trips, time.process_time(), time.perf_counter())
    assert decided == size == len(slots) == done, (decided, size, len(slots), done)
    return {
        "decide_rt": mid[0] - before[0],
        "decide_cpu": mid[1] - before[1],
        "decide_wall": mid[2] - before[2],
        "submit_rt": after[0] - mid[0],
        "submit_cpu": after[1] - mid[1],
        "submit_wall": after[2] - mid[2],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    args = parser.parse_args()
    run = secrets.token_hex(3)
    database = f"jobwarden_bench_schedules_{run}"
    env = {
        "JOBWARDEN_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}",
        "JOBWARDEN_KEY_PREFIX": f"jwbench-{run}",
        "JOBWARDEN_QUEUE": f"jwbench-{run}",
        "JOBWARDEN_SANDBOX_TOKEN": secrets.token_hex(8),
        # Every submit in this process, so its cost is measured here: a real tick hands
        # shares of more than JOBWARDEN_SCHEDULE_SUBMIT_CHUNK slots to the workers.
        "JOBWARDEN_SCHEDULE_SUBMIT_CHUNK": "1000000",
    }
    os.environ.update(env)

    from sqlalchemy import create_engine, text

    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import ensure_database, upgrade
    from jobwarden.tasks.runtime import current, reset

    settings = get_settings()
    ensure_database(settings.database_url)
    try:
        upgrade(settings.database_url)
        counter = Counter()
        _count(counter)
        rt = current()
        print(
            f"schedules firing every minute, one tick (batch {settings.schedule_batch_size}), "
            "no worker consuming:"
        )
        results = {}
        minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=1)
        for n, size in enumerate(args.sizes):
            at = minute + timedelta(minutes=n)
            _declare(settings.database_url, size, f"s{n}", at)
            r = _measure(rt, counter, size, at)
            results[size] = r
            print(
                f"  {size:>6,} schedules: decide {r['decide_wall']:6.2f} s wall, "
                f"{r['decide_cpu']:6.2f} s CPU, {r['decide_rt']:>6,} round trips "
                f"({r['decide_rt'] / size:.3f}/slot, {1000 * r['decide_cpu'] / size:.3f} ms "
                f"CPU/slot); submit {r['submit_wall']:6.2f} s wall, {r['submit_cpu']:6.2f} s "
                f"CPU, {r['submit_rt']:>7,} round trips ({r['submit_rt'] / size:.1f}/slot, "
                f"{1000 * r['submit_cpu'] / size:.2f} ms CPU/slot)"
            )
            # Schedules of this size are ended, so the next size's tick decides only its own.
            with current().redis.pipeline() as pipe:
                pipe.delete(f"{settings.key_prefix}:celery:{settings.queue}")
                pipe.execute()
            from jobwarden.models.persistence.db import transaction

            with transaction(settings.database_url) as session:
                session.execute(text("UPDATE schedules SET status = 'paused'"))
        if len(results) >= 2:
            small, large = min(results), max(results)
            for phase in ("decide", "submit"):
                grow_rt = results[large][f"{phase}_rt"] / results[small][f"{phase}_rt"]
                grow_cpu = results[large][f"{phase}_cpu"] / max(
                    results[small][f"{phase}_cpu"], 1e-9
                )
                print(
                    f"  {phase}: {small:,} -> {large:,} schedules ({large / small:.0f}x): "
                    f"round trips {grow_rt:.1f}x, CPU {grow_cpu:.1f}x"
                )
        minute_budget = max(r["decide_wall"] + r["submit_wall"] for r in results.values())
        print(
            f"  the largest tick took {minute_budget:.1f} s of each 60 s minute "
            f"({'ok' if minute_budget < 60 else 'FALLS BEHIND'})"
        )
        return 0
    finally:
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


if __name__ == "__main__":
    raise SystemExit(main())
