"""scripts/bench_poll.py --explain: EXPLAIN (ANALYZE, BUFFERS, WAL) of a poll's statements.

On a scratch database of its own (migrated, removed at the end) it opens --operations
operations against the sandbox and polls each in this process (the real ``run_step``
of ``jobwarden.poll``, no worker) --polls times, so the history holds a few thousand
chained events; then it polls one of them once more and, just before each statement the
step sends through ``driver_execute`` (the reload and the fenced write), runs the same
statement with the same parameters under ``EXPLAIN (ANALYZE, BUFFERS, WAL)`` inside a
transaction it rolls back, and prints the plans. The step's own statement then runs as
always, so the plans are those of a realistic row (version, chain head, reservation)
and not of a hand-made one. The durable floor's write (scripts/_poll_floor_durable.py)
is explained the same way on a row with as many events, for comparison.

``--statements`` measures instead of explaining: on the same history it runs the poll's
two statements as the step sent them (the reload, then the fenced write in autocommit,
each write moving the version and the chain's seq on as a real poll does) --repeat
times on one connection, and the durable floor's reload and write as many times on a
row with as many events, in two interleaved pairs, and prints the Postgres backend's
CPU per statement (/proc, as bench_poll.py reads it). Its repetitions resolve a few per
cent of a statement's cost, which the workers' rounds, with everything else a poll does
around them, cannot.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from _bench_support import bench_contract

EXPLAIN = "EXPLAIN (ANALYZE, BUFFERS, WAL, VERBOSE OFF, COSTS OFF, TIMING ON) "


def _explained(raw: Any, statement: str, params: Mapping[str, Any] | None) -> list[str]:
    """The plan of ``statement`` as it runs now; its effects rolled back."""
    with raw.transaction(force_rollback=True):
        rows = raw.execute(EXPLAIN + statement, params).fetchall()
    return [str(r[0]) for r in rows]


def explain_mode(args: argparse.Namespace) -> int:
    token = secrets.token_hex(8)
    providers = Path(tempfile.mkdtemp(prefix="jobwarden-bench-explain-"))
    bench_contract(providers, polls=args.polls + 5)
    run = secrets.token_hex(3)
    database = f"jobwarden_bench_explain_{run}"
    os.environ.update(
        {
            "JOBWARDEN_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}",
            "JOBWARDEN_PROVIDERS_DIR": str(providers),
            "JOBWARDEN_KEY_PREFIX": f"jwbench-{run}",
            "JOBWARDEN_QUEUE": f"jwbench-{run}",
            "JOBWARDEN_SANDBOX_TOKEN": token,
        }
    )
    from jobwarden.demo.sandbox.server import SandboxServer

    sandbox = SandboxServer(token=token)
    sandbox.start()
    os.environ["JOBWARDEN_SANDBOX_URL"] = sandbox.url
    try:
        _explain(args, run, database)
    finally:
        sandbox.stop()
        _drop(run, database)
        shutil.rmtree(providers, ignore_errors=True)
    return 0


def _explain(args: argparse.Namespace, run: str, database: str) -> None:
    import psycopg

    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import ensure_database, upgrade
    from jobwarden.models.steps import CREATE, POLL
    from jobwarden.tasks.intake import submit_operation
    from jobwarden.tasks.pipeline import run_step
    from jobwarden.tasks.runtime import current

    get_settings.cache_clear()
    settings = get_settings()
    ensure_database(settings.database_url)
    upgrade(settings.database_url)
    rt = current()
    dsn = f"host=127.0.0.1 port=5432 user=postgres dbname={database}"
    admin = psycopg.connect(dsn, autocommit=True)
    due = "UPDATE operation_timers SET next_poll_at = now(), dispatched_at = NULL"
    ops = []
    for i in range(args.operations):
        answer = submit_operation(
            tenant="bench",
            provider="sandbox",
            idempotency_key=f"bench-{run}-{i}",
            command={"kind": "bench", "behaviour": {"never_finish": True, "progress": False}},
            requested_by="bench",
            runtime=rt,
        )
        assert answer.operation_id, answer
        run_step(answer.operation_id, CREATE)
        ops.append(answer.operation_id)
    for _ in range(args.polls):
        admin.execute(due)
        for op in ops:
            run_step(op, POLL)
    admin.execute("VACUUM ANALYZE")
    admin.execute(due)
    events = admin.execute("SELECT count(*) FROM operation_events").fetchone()
    print(f"history: {events[0] if events else 0} events over {len(ops)} operations\n")

    real = store.driver_execute
    plans: list[tuple[str, list[str]]] = []
    sent: list[tuple[str, dict[str, Any]]] = []

    def explaining(session: Any, statement: str, params: Mapping[str, Any]) -> Any:
        raw = session.connection().connection.driver_connection
        sent.append((statement, dict(params)))
        if not args.statements:
            plans.append((statement, _explained(raw, statement, params)))
        return real(session, statement, params)

    store.driver_execute = explaining  # type: ignore[assignment]
    try:
        state = run_step(ops[-1], POLL)
    finally:
        store.driver_execute = real  # type: ignore[assignment]
    if args.statements:
        _measure(admin, args, dsn, sent)
    else:
        print(f"one more poll of {ops[-1]} ({state}): {len(plans)} statements through the store\n")
        for n, (statement, plan) in enumerate(plans, 1):
            print(f"-- statement {n}:\n{statement}\n")
            print("\n".join(plan), end="\n\n")
        _explain_durable(admin, args)
    admin.close()
    rt.http.close()
    dispose_all()


def _explain_durable(admin: Any, args: argparse.Namespace) -> None:
    """The durable floor's write on a row with a history as long, for comparison."""
    floor = _durable_history(admin, args)
    op_id = args.operations - 1
    row = admin.execute(floor.RELOAD, {"op": op_id}).fetchone()
    assert row is not None
    params = _durable_params(floor, op_id, int(row[0]), bytes(row[1]))
    print("-- the durable floor's write, for comparison:\n")
    print("\n".join(_explained(admin, floor.WRITE, params)), end="\n\n")


def _backend_cpu(conn: Any) -> float:
    """CPU seconds (user + system) of the backend serving ``conn``, from /proc."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _per_run(conn: Any, runs: int, one: Any) -> tuple[float, float]:
    """Backend CPU (ms) and WAL (bytes, the whole server's) per call of ``one(i)``, after a
    warm-up that prepares it."""
    lsn = "SELECT pg_current_wal_insert_lsn()"
    for i in range(10):
        one(i)
    before, start = _backend_cpu(conn), conn.execute(lsn).fetchone()[0]
    for i in range(10, 10 + runs):
        one(i)
    wal = conn.execute(f"SELECT pg_wal_lsn_diff(({lsn}), %s)", (start,)).fetchone()[0]
    return (_backend_cpu(conn) - before) / runs * 1000, float(wal) / runs


def _measure(admin: Any, args: argparse.Namespace, dsn: str, sent: list[Any]) -> None:
    """--statements: Postgres CPU per statement, jobwarden's poll against the durable floor."""
    import psycopg

    (load, load_params), (write, write_params) = sent[0], sent[-1]
    floor = _durable_history(admin, args)
    floor_op = args.operations - 1
    conn = psycopg.connect(dsn, autocommit=True)

    def reload(_: int) -> None:
        conn.execute(load, load_params, prepare=True).fetchall()

    def floor_reload(_: int) -> None:
        conn.execute(floor.RELOAD, {"op": floor_op}, prepare=True).fetchall()

    def writer() -> Any:
        # As the next polls would write: each one fenced on the version the last one left.
        head = conn.execute(
            "SELECT version, event_count FROM operation_timers WHERE operation_id = %s",
            (write_params["fenced_id"],),
        ).fetchone()
        params = dict(write_params)

        def write_once(i: int) -> None:
            params.update(
                fenced_version=head[0] + i,
                set_version=head[0] + i + 1,
                e0_seq=head[1] + i + 1,
                set_event_count=head[1] + i + 1,
            )
            assert len(conn.execute(write, params, prepare=True).fetchall()) == 1

        return write_once

    def floor_writer() -> Any:
        row = conn.execute(floor.RELOAD, {"op": floor_op}).fetchone()
        params = _durable_params(floor, floor_op, int(row[0]), bytes(row[1]))
        version = params["version"]

        def write_once(i: int) -> None:
            params["version"] = version + i
            assert len(conn.execute(floor.WRITE, params, prepare=True).fetchall()) == 1

        return write_once

    runs = args.repeat
    print(f"Postgres CPU per statement, ms: {runs} runs each on one backend, in two pairs\n")
    print(
        "pair   jobwarden reload  floor reload  jobwarden write  floor write  poll ratio"
        "  WAL bytes per write (jobwarden, floor)"
    )
    for pair in (1, 2):
        (reads, _), (writes, wal) = _per_run(conn, runs, reload), _per_run(conn, runs, writer())
        (floor_reads, _), (floor_writes, floor_wal) = (
            _per_run(conn, runs, floor_reload),
            _per_run(conn, runs, floor_writer()),
        )
        ratio = (reads + writes) / (floor_reads + floor_writes)
        print(
            f"{pair:>4}   {reads:16.4f}  {floor_reads:12.4f}  {writes:15.4f}"
            f"  {floor_writes:11.4f}  {ratio:10.2f}  {wal:8.0f}, {floor_wal:.0f}"
        )
    conn.close()


def _durable_history(admin: Any, args: argparse.Namespace) -> Any:
    """The durable floor's tables, each of its operations with --polls events; its module."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _poll_floor_durable as floor

    admin.execute(floor.SCHEMA)
    for op_id in range(args.operations):
        admin.execute(
            "INSERT INTO durable_ops (id, job_id, round, chain_head) VALUES (%s, 'job', 0, %s)",
            (op_id, floor.GENESIS),
        )
        for _ in range(args.polls):
            row = admin.execute(floor.RELOAD, {"op": op_id}).fetchone()
            assert row is not None
            admin.execute(floor.WRITE, _durable_params(floor, op_id, int(row[0]), bytes(row[1])))
    admin.execute("VACUUM ANALYZE")
    return floor


def _durable_params(floor: Any, op_id: int, version: int, prev: bytes) -> dict[str, Any]:
    from psycopg.types.json import Jsonb

    body = floor.event_body(op_id, version + 1, "running", 200)
    return {
        "op": op_id,
        "version": version,
        "hash": floor.chained_hash(prev, body),
        "prev": prev,
        "body": Jsonb(body),
        "done": False,
        "status": "running",
        "delay": floor.DELAY_SECONDS,
    }


def _drop(run: str, database: str) -> None:
    import psycopg
    from redis import Redis

    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.tasks import runtime

    runtime.reset()
    dispose_all()
    with psycopg.connect(
        "host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    redis = Redis.from_url(get_settings().redis_url)
    for key in redis.scan_iter(f"jwbench-{run}*"):
        redis.delete(key)
