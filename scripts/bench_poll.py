"""Cost of one poll: jobwarden's real Celery pipeline against a hand-written Celery poll step.

Default mode (``--mode workers``), as issue 12 measures it. Two sets of real Celery
worker processes (prefork, --concurrency each) run side by side on the same sandbox
provider, Postgres and Redis, in rounds that alternate A, B, A, B ...:

- A, jobwarden: ``celery -A jobwarden.config.celery_app worker``. Each round wakes
  --operations accepted operations (created and parked before the workers start) that
  poll a never-finishing sandbox job until their request budget (--polls, from a bench
  copy of the sandbox contract with 1 ms waits) stops them.
- B, the floor: scripts/_poll_floor.py: one Redis lock, one HTTP GET, one Postgres
  transaction with an UPDATE and an INSERT, one reschedule via apply_async; each of
  --operations chains stops after --polls.
- C, the durable floor (issue 37, the reference): scripts/_poll_floor_durable.py: B's
  step plus what the invariants require, by hand: an autocommit reload of version and
  chain head, then one autocommit statement holding a version-fenced UPDATE, an event
  INSERT carrying sha256(prev_hash || RFC 8785 event) (foreign key, append-only
  trigger) and an indexed timer upsert. Same chains and budget as B.

Per round it prints polls/s, worker CPU per poll (utime + stime from /proc of every
process in the worker's process group) and Postgres CPU per poll (/proc of the backends
serving that system's database: each system has a scratch database of its own), then
medians and the ratios jobwarden / floor (targets: polls/s >= 0.85, CPU <= 1.3) and
jobwarden / durable floor (issue 37's reference), and durable / floor.
Over the whole run (warm-up round included) it prints, per poll:

- Postgres statements: waits for the server's answer counted inside the workers by
  scripts/_bench_probe.py's psycopg hook. Outside pipeline mode (none of the three uses
  it) psycopg sends one statement per wait, so round trips are statements: BEGIN,
  COMMIT and a pool's pre-ping each count as one, as the server sees them.
  pg_stat_statements needs shared_preload_libraries, which the shared server does not
  have and a bench must not reconfigure; a private server with log_statement=all would
  count the same statements at the price of a second Postgres on a 2-core machine.
- Redis commands the workers sent (one per command or pipeline; the main process's
  idle BRPOPs included).
- commits: pg_stat_database.xact_commit of the system's database, read once the
  workers have stopped (a backend flushes its counters on exit), minus this script's
  own statements. An autocommit statement is a commit, reads included.
- event rows added to operation_events (the floors write one row per poll).

Polls are the status requests the sandbox received for the round's jobs. Databases
and key prefixes are private to the run and removed at the end. Machines are noisy:
read the ratios of one run, not absolute figures. Linux only (/proc).

``--dbos PYTHON`` adds D, DBOS Transact (issue 37's "against DBOS" figure):
scripts/_poll_dbos.py, run by that Python (``scripts/install_dbos`` makes a venv of its
own and prints it) in --concurrency processes, each starting its share of a round's
workflows (``DBOS.start_workflow``, no queue to poll), --dbos-threads at once. Each
operation is one workflow looping ``step(GET); DBOS.sleep`` until the same budget, DBOS's
own durable poll loop; its statements are counted by the same probe, its "event rows" are
DBOS's ``operation_outputs`` (a step's output, a sleep). Its processes are stopped
(SIGSTOP) outside its own rounds, so its background threads load no other system's.

``--private-redis`` runs a redis-server of the run's own (the machine's serves other
work too) and prints its CPU per poll beside the workers' and Postgres's.

``--mode in-process`` keeps the older measurement (scripts/_poll_in_process.py).
``--explain`` prints EXPLAIN (ANALYZE, BUFFERS, WAL) of one poll's statements on a
history of --operations x --polls events, and the durable floor's write beside them
(scripts/_poll_explain.py). ``--statements`` prints the Postgres CPU of each of those
statements instead, run --repeat times on one backend (the same script).

    .venv/bin/python scripts/bench_poll.py --operations 20 --polls 25 --rounds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

from _bench_support import (  # noqa: E402 - after the path set-up above
    Worker,
    bench_contract,
    cpu_delta,
    cpu_seconds,
    group_cpu,
    sandbox_client,
    start_worker,
    wait_until,
)
from _poll_dbos import READY  # noqa: E402 - no dbos import here: main() has them

SYSTEMS = ("jobwarden", "floor", "durable")
# The Celery app, task and table names of the two hand-written floors.
FLOORS = {
    "floor": ("_poll_floor", "floor.poll", "floor_ops", "floor_events"),
    "durable": ("_poll_floor_durable", "durable.poll", "durable_ops", "durable_events"),
}
BEHAVIOUR = {"never_finish": True, "progress": False}
# --dbos: DBOS Transact's own poll loop (scripts/_poll_dbos.py, run by DBOS's venv), its
# bench table and the table of the durable rows it writes (a step's output, a sleep).
DBOS = ("_poll_dbos", "dbos_ops", "dbos.operation_outputs")


def systems_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The systems of a run: jobwarden, the two floors, and DBOS with ``--dbos``."""
    return (*SYSTEMS, "dbos") if getattr(args, "dbos", None) else SYSTEMS


def _dsn(database: str) -> str:
    return f"host=127.0.0.1 port=5432 user=postgres dbname={database}"


class Counted:
    """An autocommit connection that counts its statements (each one is a commit)."""

    def __init__(self, database: str) -> None:
        import psycopg

        self.conn = psycopg.connect(_dsn(database), autocommit=True)
        self.statements = 0
        self.pid = int(self.scalar("SELECT pg_backend_pid()"))

    def scalar(self, sql: str, params: Any = None) -> Any:
        self.statements += 1
        row = self.conn.execute(sql, params).fetchone()
        return row[0] if row else None


@dataclass
class Round:
    system: str
    polls: int
    wall: float
    worker_cpu: float
    pg_cpu: float
    main_cpu: float  # of worker_cpu, the Celery main process's (consumer, acks)
    redis_cpu: float | None  # the private redis-server's (--private-redis), else None


@dataclass(frozen=True)
class Summary:
    """What one workers-mode run measured, per system (scripts/bench_scale.py reads it)."""

    rate: dict[str, float]  # polls/s, median of the measured rounds
    worker_ms: dict[str, float]  # worker CPU per poll, ms (median)
    pg_ms: dict[str, float]  # Postgres backends' CPU per poll, ms (median)
    redis_ms: dict[str, float] | None  # redis-server's CPU per poll, ms (--private-redis)
    paired_rate: float  # median over round pairs of jobwarden's polls/s / the floor's
    per_poll: dict[str, dict[str, float]]  # pg round trips, redis commands, commits, events
    hot: dict[str, dict[str, tuple[int, int]]]  # table: (updates, of them HOT), whole run
    # median over rounds of jobwarden's polls/s / the durable floor's (issue 37's figure)
    paired_rate_durable: float = 0.0


@dataclass
class Bench:
    """One workers-mode run: what it set up, and must clean up."""

    args: argparse.Namespace
    run: str
    tmp: Path
    token: str
    redis_url: str
    sandbox: Any = None
    redis: Any = None
    workers: list[Worker] = field(default_factory=list)
    redis_pid: int | None = None  # a private redis-server's, whose CPU is all the bench's
    # An existing jobwarden database to run on and keep (scripts/bench_scale.py's).
    kept_database: str | None = None
    ops: list[list[str]] = field(default_factory=list)  # jobwarden's, per round
    # each floor's (op id, sandbox job id), per round
    jobs: dict[str, list[list[tuple[int, str]]]] = field(default_factory=dict)

    @property
    def systems(self) -> tuple[str, ...]:
        return systems_of(self.args)

    def database(self, system: str) -> str:
        if system == "jobwarden" and self.kept_database:
            return self.kept_database
        return f"jobwarden_bench_{'poll' if system == 'jobwarden' else system}_{self.run}"

    def prefix(self, system: str) -> str:
        return f"jwbench-{self.run}" if system == "jobwarden" else f"jwbench-{system}-{self.run}"

    def env(self, system: str) -> dict[str, str]:
        common = {
            "BENCH_QUEUE": self.prefix(system),
            "BENCH_PROBE_REDIS_URL": self.redis_url,
            "BENCH_PROBE_PREFIX": f"{self.prefix(system)}:probe",
        }
        if self.args.profile:
            common["BENCH_PROFILE_DIR"] = str(Path(self.args.profile).resolve())
        if system == "jobwarden":
            return common | {
                "JOBWARDEN_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:5432/"
                + self.database(system),
                "JOBWARDEN_REDIS_URL": self.redis_url,
                "JOBWARDEN_BROKER_URL": self.redis_url,
                "JOBWARDEN_PROVIDERS_DIR": str(self.tmp / "providers"),
                "JOBWARDEN_KEY_PREFIX": self.prefix(system),
                "JOBWARDEN_QUEUE": self.prefix(system),
                "JOBWARDEN_SANDBOX_TOKEN": self.token,
                "JOBWARDEN_SANDBOX_URL": self.sandbox.url,
            }
        floor = {
            "BENCH_FLOOR_PREFIX": self.prefix(system),
            "BENCH_FLOOR_QUEUE": self.prefix(system),
            "BENCH_FLOOR_BROKER": self.redis_url,
            "BENCH_FLOOR_DSN": _dsn(self.database(system)),
            "BENCH_FLOOR_SANDBOX": self.sandbox.url,
            "BENCH_FLOOR_TOKEN": self.token,
        }
        if system == "dbos":
            floor |= {
                "BENCH_DBOS_URL": "postgresql://postgres@127.0.0.1:5432/" + self.database(system),
                "BENCH_DBOS_THREADS": str(self.args.dbos_threads),
            }
        return common | floor


def run_workers(
    args: argparse.Namespace,
    *,
    inspect: Callable[[str, list[str]], None] | None = None,
    database: str | None = None,
) -> Summary:
    """One workers-mode run on databases, key prefixes (and with ``--private-redis`` a
    redis-server) of its own, all removed at the end; ``inspect(database_url,
    operation_ids)`` runs once the workers have stopped. ``database``: run jobwarden on
    that existing database (migrated on the way; scripts/bench_scale.py's preloaded
    ones) and keep it. One run per process: the Celery app reads its broker and key
    prefix at import."""
    from redis import Redis

    from jobwarden.config.settings import get_settings
    from jobwarden.demo.embedded import LocalRedis
    from jobwarden.demo.sandbox.server import SandboxServer

    tmp = Path(tempfile.mkdtemp(prefix="jobwarden-bench-poll-"))
    (tmp / "providers").mkdir()
    bench_contract(tmp / "providers", polls=args.polls, parked=True)
    private = None
    if getattr(args, "private_redis", False):
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("--private-redis: redis-server is not on PATH")
        private = LocalRedis(binary, prefix="jobwarden-bench-redis-")
        private.start()
    redis_url = (
        private.url
        if private is not None
        else os.environ.get("JOBWARDEN_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    bench = Bench(args, secrets.token_hex(3), tmp, secrets.token_hex(8), redis_url)
    bench.kept_database = database
    bench.redis_pid = private.proc.pid if private is not None and private.proc else None
    bench.redis = Redis.from_url(redis_url)
    bench.sandbox = SandboxServer(token=bench.token)
    bench.sandbox.start()
    try:
        for system in bench.systems:
            os.environ.update(bench.env(system))
        get_settings.cache_clear()  # read again with this run's database and prefix
        _set_up_jobwarden(bench)
        for system in bench.systems[1:]:
            _set_up_floor(bench, system)
        summary = _measure(bench)
        if inspect is not None:
            inspect(get_settings().database_url, [op for batch in bench.ops for op in batch])
        return summary
    finally:
        _clean_up(bench)
        if private is not None:
            private.stop()
            shutil.rmtree(private.root, ignore_errors=True)


def _set_up_jobwarden(bench: Bench) -> None:
    """Operations created in this process, each parked an hour by the bench contract."""
    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import ensure_database, upgrade
    from jobwarden.models.steps import CREATE
    from jobwarden.tasks.intake import submit_operation
    from jobwarden.tasks.pipeline import run_step
    from jobwarden.tasks.runtime import current

    settings = get_settings()
    ensure_database(settings.database_url)
    upgrade(settings.database_url)
    rt = current()
    for r in range(bench.args.rounds + 1):
        batch = []
        for i in range(bench.args.operations):
            answer = submit_operation(
                tenant="bench",
                provider="sandbox",
                idempotency_key=f"bench-{bench.run}-{r}-{i}",  # a kept database is reused
                command={"kind": "bench", "behaviour": BEHAVIOUR},
                requested_by="bench",
                runtime=rt,
            )
            assert answer.operation_id, answer
            run_step(answer.operation_id, CREATE)
            batch.append(answer.operation_id)
        bench.ops.append(batch)
    bench.redis.delete(f"{settings.key_prefix}:celery:{settings.queue}")  # intake's creates
    rt.http.close()
    dispose_all()  # closed backends flush their counters before the baseline is read


def _set_up_floor(bench: Bench, system: str) -> None:
    import importlib

    import psycopg

    module, ops_table = (DBOS[0], DBOS[1]) if system == "dbos" else FLOORS[system][::2]
    # Both floors read BENCH_FLOOR_* at import (their broker key prefix): this process
    # imports each with its own system's variables, once.
    os.environ.update(bench.env(system))
    floor = importlib.import_module(module)
    with psycopg.connect(_dsn("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{bench.database(system)}"')
    bench.jobs[system] = []
    with (
        psycopg.connect(_dsn(bench.database(system)), autocommit=True) as conn,
        sandbox_client(bench.sandbox.url, bench.token) as http,
    ):
        conn.execute(floor.SCHEMA)
        for r in range(bench.args.rounds + 1):
            batch = []
            for i in range(bench.args.operations):
                answer = http.post(
                    "/v1/jobs",
                    json={"behaviour": BEHAVIOUR},
                    headers={"Idempotency-Key": secrets.token_hex(8)},
                )
                job = answer.json().get("id")
                if job is None:
                    raise RuntimeError(f"the sandbox refused a floor job: {answer.text}")
                op_id = r * bench.args.operations + i
                if system == "durable":
                    conn.execute(
                        "INSERT INTO durable_ops (id, job_id, round, chain_head)"
                        " VALUES (%s, %s, %s, %s)",
                        (op_id, job, r, floor.GENESIS),
                    )
                else:
                    conn.execute(
                        f"INSERT INTO {ops_table} (id, job_id, round) VALUES (%s, %s, %s)",
                        (op_id, job, r),
                    )
                batch.append((op_id, str(job)))
            bench.jobs[system].append(batch)


@dataclass
class DbosWorkers:
    """``--dbos``: DBOS's worker processes (--concurrency of them, each starting its share
    of a round), one process group, as a Celery worker and its children are. Stopped
    (SIGSTOP) outside DBOS's own rounds: DBOS's background threads (its notification
    listener, its scheduler) then cost the other systems' rounds nothing."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    processes: int

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"dbos exited:\n{self.log.read_text()[-3000:]}")
        return self.log.read_text(errors="replace").count(READY) >= self.processes

    def pause(self) -> None:
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.resume()  # a stopped process would hold SIGTERM until continued
        Worker.stop(self)  # type: ignore[arg-type]  # the same group stop: SIGTERM, then SIGKILL


def _start_dbos(bench: Bench) -> DbosWorkers:
    """DBOS's processes, with the statement probe loaded first, as the Celery workers'."""
    args = bench.args
    log = bench.tmp / "dbos.log"
    boot = (
        "import os, _bench_probe, _poll_dbos;"
        " _bench_probe.install(os.environ['BENCH_PROBE_REDIS_URL'],"
        " os.environ['BENCH_PROBE_PREFIX']); _poll_dbos.main()"
    )
    env = {**os.environ, **bench.env("dbos"), "PYTHONPATH": str(REPO / "scripts")}
    procs: list[subprocess.Popen[bytes]] = []
    with log.open("ab") as out:
        for i in range(args.concurrency):
            procs.append(
                subprocess.Popen(
                    [args.dbos, "-c", boot],
                    env=env
                    | {"BENCH_DBOS_INDEX": str(i), "BENCH_DBOS_PROCESSES": str(args.concurrency)},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=str(REPO),
                    # The first leads a group of its own; the others join it.
                    process_group=0 if i == 0 else procs[0].pid,
                )
            )
    return DbosWorkers("dbos", procs[0], log, args.concurrency)


class Meter:
    """Server-side counters read from the maintenance database (never counted)."""

    def __init__(self, bench: Bench, own: set[int]) -> None:
        self.bench = bench
        self.admin = Counted("postgres")
        self.own = own | {self.admin.pid}

    def commits(self) -> dict[str, int]:
        names = {self.bench.database(s): s for s in self.bench.systems}
        self.admin.conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = self.admin.conn.execute(
            "SELECT datname, xact_commit FROM pg_stat_database WHERE datname = ANY(%s)",
            (list(names),),
        ).fetchall()
        return {names[name]: int(n) for name, n in rows}

    def settled_commits(self) -> dict[str, int]:
        """The counters once they stop moving (closed backends flush on exit)."""
        previous: dict[str, int] = {}
        for _ in range(50):
            now = self.commits()
            if now == previous:
                break
            previous = now
            time.sleep(0.3)
        return previous

    def backends(self, system: str) -> dict[int, float]:
        # Client backends only: an autovacuum worker on the database would be counted only
        # if it happened to live at both snapshots.
        pids = self.admin.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s"
            " AND backend_type = 'client backend'",
            (self.bench.database(system),),
        ).fetchall()
        return {pid: cpu_seconds(pid) for (pid,) in pids if pid not in self.own}


def _updates(database: str) -> dict[str, tuple[int, int]]:
    """Per table of ``database``: (rows updated, of them HOT) since the server started.

    A HOT update writes no new index entry (issue 23): the poll's target is the
    operations row, whose updates should all be HOT once the timer lives apart.
    """
    import psycopg

    with psycopg.connect(_dsn(database), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(
            "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
        ).fetchall()
    return {name: (int(upd), int(hot)) for name, upd, hot in rows}


def _hot_report(
    before: dict[str, dict[str, tuple[int, int]]], bench: Bench
) -> dict[str, dict[str, tuple[int, int]]]:
    """Print and return, per system and table, (updates, of them HOT) over the run."""
    print("\nHOT updates over the whole run (pg_stat_user_tables; no index entry each):")
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for s in bench.systems:
        after = _updates(bench.database(s))
        out[s] = {}
        for table, (upd, hot) in sorted(after.items()):
            was_upd, was_hot = before[s].get(table, (0, 0))
            n, h = upd - was_upd, hot - was_hot
            if n:
                out[s][table] = (n, h)
                print(f"  {s:<10}{table:<22} updates {n:7d}   HOT {h:7d}   ratio {h / n:.2f}")
    return out


def _measure(bench: Bench) -> Summary:
    import importlib

    from jobwarden.models.states import AUTOMATION_STOPPED, TERMINAL
    from jobwarden.models.states import OperationState as S
    from jobwarden.tasks.dispatch import enqueue_many
    from jobwarden.tasks.runtime import current

    args = bench.args
    systems = bench.systems
    apps = {"jobwarden": "jobwarden.config.celery_app"} | {s: f[0] for s, f in FLOORS.items()}
    for system, app in apps.items():
        bench.workers.append(start_worker(args, bench.tmp, system, app, bench.env(system)))
    dbos = _start_dbos(bench) if "dbos" in systems else None
    if dbos is not None:
        bench.workers.append(dbos)
    for worker in bench.workers:
        wait_until(worker.ready, 60, f"worker {worker.name} to be ready", interval=0.1)
    if dbos is not None:
        dbos.pause()
    group = {w.name: w.proc.pid for w in bench.workers}
    db = {s: Counted(bench.database(s)) for s in systems}
    meter = Meter(bench, {c.pid for c in db.values()})
    commits_before = meter.settled_commits()
    updates_before = {s: _updates(bench.database(s)) for s in systems}
    all_ops = [op for batch in bench.ops for op in batch]
    count_events = "SELECT count(*) FROM operation_events WHERE operation_id = ANY(%s::uuid[])"
    events_before = int(db["jobwarden"].scalar(count_events, (all_ops,)))
    statements_before = {s: db[s].statements for s in systems}
    stopped = [s.value for s in TERMINAL | AUTOMATION_STOPPED]
    rt = current()

    def run_jobwarden(r: int) -> None:
        ids = bench.ops[r]
        db["jobwarden"].scalar(
            "UPDATE operation_timers SET next_poll_at = now(), dispatched_at = now()"
            " WHERE operation_id = ANY(%s::uuid[]) RETURNING 1",
            (ids,),
        )
        assert enqueue_many(rt, [(uuid.UUID(op), S.accepted) for op in ids])
        finished = (
            "SELECT count(*) FROM operations WHERE operation_id = ANY(%s::uuid[])"
            " AND state = ANY(%s)"
        )
        wait_until(
            lambda: db["jobwarden"].scalar(finished, (ids, stopped)) == len(ids),
            args.timeout,
            f"jobwarden round {r}",
        )

    def jobwarden_polls(r: int) -> int:
        total = 0
        for op in bench.ops[r]:
            job = db["jobwarden"].scalar(
                "SELECT remote_job_id FROM operations WHERE operation_id = %s", (op,)
            )
            total += sum(1 for q in bench.sandbox.requests(job_id=job) if q["kind"] == "status")
        return total

    def floor_steps(system: str) -> tuple[Callable[[int], None], Callable[[int], int]]:
        module, task, ops_table, _ = FLOORS[system]
        floor_app = importlib.import_module(module).app

        def run_floor(r: int) -> None:
            for op_id, job_id in bench.jobs[system][r]:
                floor_app.send_task(
                    task, args=[op_id, job_id, args.polls], queue=bench.prefix(system)
                )
            finished = f"SELECT count(*) FROM {ops_table} WHERE round = %s AND done"
            wait_until(
                lambda: db[system].scalar(finished, (r,)) == len(bench.jobs[system][r]),
                args.timeout,
                f"{system} round {r}",
            )

        def floor_polls(r: int) -> int:
            polls = f"SELECT sum(polls) FROM {ops_table} WHERE round = %s"
            return int(db[system].scalar(polls, (r,)))

        return run_floor, floor_polls

    def dbos_steps() -> tuple[Callable[[int], None], Callable[[int], int]]:
        import json

        from _poll_dbos import CHANNEL

        def run_dbos(r: int) -> None:
            # Every DBOS process hears the round and starts its share of the workflows;
            # the last step of each marks its row done.
            round_ = {"operations": bench.jobs["dbos"][r], "polls": args.polls}
            db["dbos"].scalar("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps(round_)))
            finished = f"SELECT count(*) FROM {DBOS[1]} WHERE round = %s AND done"
            wait_until(
                lambda: db["dbos"].scalar(finished, (r,)) == len(bench.jobs["dbos"][r]),
                args.timeout,
                f"dbos round {r}",
            )

        def dbos_polls(r: int) -> int:
            return int(
                db["dbos"].scalar(f"SELECT sum(polls) FROM {DBOS[1]} WHERE round = %s", (r,))
            )

        return run_dbos, dbos_polls

    steps = {"jobwarden": (run_jobwarden, jobwarden_polls)} | {s: floor_steps(s) for s in FLOORS}
    if "dbos" in systems:
        steps["dbos"] = dbos_steps()
    results: list[Round] = []
    total_polls = dict.fromkeys(systems, 0)
    redis_pid = bench.redis_pid
    print(
        f"{'round':>5} {'system':<10}{'polls':>7}{'seconds':>9}{'polls/s':>9}"
        f"{'worker ms/poll':>16}{'of it main':>12}{'postgres ms/poll':>18}"
        + (f"{'redis ms/poll':>15}" if redis_pid else "")
    )
    for r in range(args.rounds + 1):
        for system in systems:
            run, polls_of = steps[system]
            if system == "dbos" and dbos is not None:
                dbos.resume()
            cpu0, pg0 = group_cpu(group[system]), meter.backends(system)
            redis0 = cpu_seconds(redis_pid) if redis_pid else 0.0
            start = time.perf_counter()
            run(r)
            wall = time.perf_counter() - start
            cpu1, pg1 = group_cpu(group[system]), meter.backends(system)
            redis1 = cpu_seconds(redis_pid) if redis_pid else 0.0
            polls = polls_of(r)
            if system == "dbos" and dbos is not None:
                dbos.pause()
            total_polls[system] += polls
            main = group[system]
            res = Round(
                system,
                polls,
                wall,
                cpu_delta(cpu0, cpu1),
                cpu_delta(pg0, pg1),
                cpu1.get(main, 0.0) - cpu0.get(main, 0.0),
                redis1 - redis0 if redis_pid else None,
            )
            print(
                f"{'warm' if r == 0 else r:>5} {system:<10}{polls:>7}{wall:>9.2f}"
                f"{polls / wall:>9.1f}{1000 * res.worker_cpu / polls:>16.2f}"
                f"{1000 * res.main_cpu / polls:>12.2f}"
                f"{1000 * res.pg_cpu / polls:>18.2f}"
                + (f"{1000 * (redis1 - redis0) / polls:>15.2f}" if redis_pid else "")
            )
            if r > 0:  # round 0 warms imports, pools and caches up
                results.append(res)

    time.sleep(0.8)  # the probes flush every 0.25 s
    probes = {
        s: {
            name: int(bench.redis.get(f"{bench.prefix(s)}:probe:{name}") or 0)
            for name in ("pg", "redis")
        }
        for s in systems
    }
    events = {
        "jobwarden": int(db["jobwarden"].scalar(count_events, (all_ops,))) - events_before,
    } | {s: int(db[s].scalar(f"SELECT count(*) FROM {f[3]}")) for s, f in FLOORS.items()}
    if "dbos" in systems:
        events["dbos"] = int(db["dbos"].scalar(f"SELECT count(*) FROM {DBOS[2]}"))
    own = {s: db[s].statements - statements_before[s] for s in systems}
    for worker in bench.workers:
        worker.stop()
    for conn in db.values():
        conn.conn.close()
    commits_after = meter.settled_commits()
    for s in systems:
        probes[s]["commits"] = commits_after[s] - commits_before[s] - own[s]
        probes[s]["events"] = events[s]
    summary = _report(args, results, total_polls, probes)
    return dataclasses.replace(summary, hot=_hot_report(updates_before, bench))


def _report(
    args: argparse.Namespace,
    results: list[Round],
    polls: dict[str, int],
    counts: dict[str, dict[str, int]],
) -> Summary:
    """Print medians and ratios; `counts[system]`: pg, redis, commits and events totals."""
    systems = systems_of(args)

    def median(system: str, per: str) -> float:
        values = []
        for x in results:
            if x.system == system:
                value = {
                    "rate": x.polls / x.wall,
                    "cpu": x.worker_cpu,
                    "pg": x.pg_cpu,
                    "redis": x.redis_cpu or 0.0,
                }[per]
                values.append(value if per == "rate" else 1000 * value / x.polls)
        return statistics.median(values)

    rate = {s: median(s, "rate") for s in systems}
    cpu = {s: median(s, "cpu") for s in systems}
    pg = {s: median(s, "pg") for s in systems}
    measured_redis = all(x.redis_cpu is not None for x in results)
    redis = {s: median(s, "redis") for s in systems} if measured_redis else None
    print(f"\nmedians over {args.rounds} rounds each (warm-up left out):")
    for s in systems:
        extra = f"   Redis CPU {redis[s]:5.2f} ms/poll" if redis else ""
        together = cpu[s] + pg[s] + (redis[s] if redis else 0.0)
        print(
            f"  {s:<10}{rate[s]:8.1f} polls/s   worker CPU {cpu[s]:6.2f} ms/poll"
            f"   Postgres CPU {pg[s]:5.2f} ms/poll{extra}   together {together:6.2f} ms/poll"
        )
    pairs = [
        ("jobwarden", "durable", "  <- issue 37's figure"),
        ("jobwarden", "floor", " (issue 12: polls/s >= 0.85, worker CPU <= 1.3)"),
        ("durable", "floor", "  <- what durability costs by hand"),
    ]
    if "dbos" in systems:
        pairs.append(("jobwarden", "dbos", "  <- issue 37: polls/s >= 1.4"))
    for a, b, target in pairs:
        print(
            f"  ratio {a} / {b}: polls/s {rate[a] / rate[b]:.2f},"
            f" worker CPU {cpu[a] / cpu[b]:.2f},"
            f" Postgres CPU {pg[a] / max(pg[b], 1e-9):.2f},"
            f" together {(cpu[a] + pg[a]) / (cpu[b] + pg[b]):.2f}{target}"
        )
    # Rounds alternate A, B, C, A, B, C ...: the systems of one round shared the machine's
    # load, so the per-round ratio is the steadier figure on a busy machine.
    by_round = [
        {x.system: x for x in results[i : i + len(systems)]}
        for i in range(0, len(results), len(systems))
    ]

    def paired(a: str, b: str, per: Callable[[Round], float]) -> float:
        return statistics.median(per(one[a]) / per(one[b]) for one in by_round)

    def per_second(x: Round) -> float:
        return x.polls / x.wall

    def worker_ms(x: Round) -> float:
        return x.worker_cpu / x.polls

    def pg_ms(x: Round) -> float:
        return x.pg_cpu / max(x.polls, 1) or 1e-9

    if "dbos" in systems:
        print(
            f"  ratio jobwarden / dbos per round (median): polls/s"
            f" {paired('jobwarden', 'dbos', per_second):.2f} (issue 37: >= 1.4),"
            f" worker CPU {paired('jobwarden', 'dbos', worker_ms):.2f},"
            f" Postgres CPU {paired('jobwarden', 'dbos', pg_ms):.2f}"
        )
    paired_rate = paired("jobwarden", "floor", per_second)
    paired_rate_durable = paired("jobwarden", "durable", per_second)
    for a, b in (("jobwarden", "durable"), ("jobwarden", "floor"), ("durable", "floor")):
        print(
            f"  ratio {a} / {b} per round (median): polls/s {paired(a, b, per_second):.2f},"
            f" worker CPU {paired(a, b, worker_ms):.2f},"
            f" Postgres CPU {paired(a, b, pg_ms):.2f}"
        )
    print("\nper poll over the whole run (warm-up included):")
    for s in systems:
        n = polls[s]
        c = counts[s]
        print(
            f"  {s:<10}Postgres statements {c['pg'] / n:5.2f}"
            f"   Redis commands {c['redis'] / n:5.2f}"
            f"   commits {c['commits'] / n:5.2f}   event rows {c['events'] / n:5.2f}"
            f"   ({n} polls)"
        )
    return Summary(
        rate=rate,
        worker_ms=cpu,
        pg_ms=pg,
        redis_ms=redis,
        paired_rate=paired_rate,
        paired_rate_durable=paired_rate_durable,
        per_poll={s: {k: v / polls[s] for k, v in counts[s].items()} for s in systems},
        hot={},
    )


def _clean_up(bench: Bench) -> None:
    import psycopg

    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.tasks import runtime

    for worker in bench.workers:
        worker.stop()
    bench.sandbox.stop()
    runtime.reset()
    dispose_all()
    with psycopg.connect(_dsn("postgres"), autocommit=True) as admin:
        for system in bench.systems:
            if bench.database(system) != bench.kept_database:
                admin.execute(f'DROP DATABASE IF EXISTS "{bench.database(system)}" WITH (FORCE)')
    for system in bench.systems:
        for key in bench.redis.scan_iter(f"{bench.prefix(system)}*"):
            bench.redis.delete(key)
    shutil.rmtree(bench.tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["workers", "in-process"], default="workers")
    parser.add_argument("--operations", type=int, default=20, help="operations per round")
    parser.add_argument("--polls", type=int, default=25, help="polls per operation per round")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per system")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes each")
    parser.add_argument("--loglevel", default="INFO", help="the workers' (compose: INFO)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per round")
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="cProfile every pool process on CPU time into DIR/<queue>-<pid>.pstats"
        " (slows both systems; for finding costs, not for the ratios)",
    )
    parser.add_argument(
        "--dbos",
        metavar="PYTHON",
        help="also run DBOS Transact's own poll loop (scripts/_poll_dbos.py) as a fourth system,"
        " with this Python (scripts/install_dbos prints one): issue 37's 'against DBOS' figure",
    )
    parser.add_argument(
        "--dbos-threads",
        type=int,
        default=4,
        help="workflows each DBOS process runs at once (its queue's worker_concurrency)",
    )
    parser.add_argument(
        "--private-redis",
        action="store_true",
        help="run a redis-server of the benchmark's own and print its CPU per poll"
        " (the machine's Redis serves others too)",
    )
    parser.add_argument(
        "--statements",
        action="store_true",
        help="print the Postgres CPU of the poll's two statements, each run --repeat times on"
        " one backend, against the durable floor's (scripts/_poll_explain.py), then stop",
    )
    parser.add_argument("--repeat", type=int, default=3000, help="--statements' runs of each")
    parser.add_argument("--database", default="jobwarden_bench", help="in-process mode's")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="print EXPLAIN (ANALYZE, BUFFERS, WAL) of one poll's statements on a history of"
        " --operations x --polls events (scripts/_poll_explain.py), then stop",
    )
    args = parser.parse_args()
    if args.explain or args.statements:
        from _poll_explain import explain_mode

        return explain_mode(args)
    if args.mode == "in-process":
        from _poll_in_process import in_process_mode

        return in_process_mode(args)
    run_workers(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
