"""Intake throughput: POST /v1/operations over HTTP against submit_operation in-process.

Creates a scratch database of its own (migrated, dropped at the end whatever happens)
and a Redis key prefix and queue of their own (every key under them deleted at the end;
no Celery worker runs, the wake-ups just queue). Starts the API as ``jobwarden api``
does (uvicorn, workers from JOBWARDEN_API_WORKERS or ``--api-workers``) on a free
port, creates a token, then for 1 and 4 client processes drives, for ``--seconds``
each and in the same run:

- ``submit_operation`` called in the client process (in-process: no HTTP, no auth);
- ``POST /v1/operations`` from an ``http.client`` connection kept alive per process;
- the same request to a hand-written FastAPI endpoint (scripts/_intake_floor.py: one
  bearer check against a constant, one ``INSERT ... ON CONFLICT DO NOTHING`` claim, one
  Celery publish), served by uvicorn with as many workers as jobwarden's API, on the
  same database and Redis: the floor of an HTTP intake (issue 23);
- the same request to the honest floor (scripts/_intake_floor_honest.py, issue 37's
  reference): a token table lookup, the command checked against a JSON Schema, an RFC
  8785 fingerprint, the row and its first chained event inserted by one statement, one
  publish; same uvicorn shape, same database and Redis;

first with a new Idempotency-Key per submission, then replaying keys each process
created beforehand (answer ``replayed``; over HTTP the original 201 again). Prints
submissions/s, p50/p99 latency in ms, CPU per submission (client processes; server
worker processes for HTTP), Postgres statements per submission, the HTTP / in-process,
HTTP / FastAPI-floor, HTTP / honest-floor and honest / bare-floor ratios, issue
10's targets (HTTP >= 0.7 x in-process and p99 < 25 ms from four processes, in-process
>= 600/s from four processes) and issue 23's (HTTP >= 0.85 x the FastAPI floor with the
defaults, p99 < 25 ms, from four processes, new keys). A benchmark prints figures; no
test times anything.

Statements are counted inside every process that talks to Postgres for a door (the
client processes in-process, every uvicorn process over HTTP) by scripts/_bench_probe.py's
psycopg hook, loaded into the servers through a ``sitecustomize`` of the run's own
(uvicorn spawns its workers, so a patch made before the fork would not reach them).
Outside pipeline mode psycopg sends one statement per wait for the server, so BEGIN,
COMMIT, ``SET LOCAL`` and a pool's pre-ping count one each. pg_stat_statements would
need shared_preload_libraries, which the shared server lacks and a bench must not set.

    .venv/bin/python scripts/bench_intake.py --seconds 5 --api-workers 2 --token-cache-seconds 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from _bench_support import cpu_delta, group_cpu, wait_until  # noqa: E402

PROVIDER = "sandbox"
TENANT = "bench"
REPLAY_KEYS = 200  # keys each process creates (untimed) before the replay phase
DOORS = ("python", "http", "floor", "honest")


def _command(n: int) -> dict[str, Any]:
    return {"kind": "export", "behaviour": {"polls_to_finish": 1}, "n": n}


@dataclass(frozen=True, slots=True)
class Job:
    # "python" (in-process), "http" (jobwarden's API), "floor" (bare FastAPI floor) or
    # "honest" (the honest floor, issue 37)
    door: str
    mode: str  # "new" or "replay"
    seconds: float
    index: int
    port: int
    token: str


def _in_process(job: Job, keys: list[str], deadline: float) -> tuple[list[float], int]:
    from jobwarden.tasks.intake import SubmitOutcome, submit_operation

    want = SubmitOutcome.created if job.mode == "new" else SubmitOutcome.replayed
    samples: list[float] = []
    errors = 0
    n = 0
    while time.perf_counter() < deadline:
        key = keys[n % len(keys)] if keys else uuid.uuid4().hex
        started = time.perf_counter()
        result = submit_operation(
            tenant=TENANT,
            provider=PROVIDER,
            idempotency_key=key,
            command=_command(n % len(keys) if keys else n),
            requested_by="bench",
        )
        samples.append(time.perf_counter() - started)
        errors += result.outcome is not want
        n += 1
    return samples, errors


def _over_http(job: Job, keys: list[str], deadline: float, conn: Any) -> tuple[list[float], int]:
    samples: list[float] = []
    errors = 0
    n = 0
    headers = {
        "Authorization": f"Bearer {job.token}",
        "Content-Type": "application/json",
    }
    while time.perf_counter() < deadline:
        key = keys[n % len(keys)] if keys else uuid.uuid4().hex
        body = json.dumps(
            {"provider": PROVIDER, "command": _command(n % len(keys) if keys else n)}
        ).encode()
        started = time.perf_counter()
        conn.request("POST", "/v1/operations", body, {**headers, "Idempotency-Key": key})
        answer = conn.getresponse()
        answer.read()
        samples.append(time.perf_counter() - started)
        replayed = answer.getheader("Idempotent-Replayed") == "true"
        errors += answer.status != 201 or replayed != (job.mode == "replay")
        n += 1
    return samples, errors


def _client(job: Job, ready: Any, go: Any, out: Any) -> None:
    """One client process: warm up, make the replay keys, wait for the others, run."""
    import http.client

    if job.door == "python":  # the servers load the probe through their sitecustomize
        import _bench_probe

        _bench_probe.install(os.environ["JOBWARDEN_REDIS_URL"], _probe_prefix("python"))
    conn = http.client.HTTPConnection("127.0.0.1", job.port, timeout=30)
    keys: list[str] = []
    if job.mode == "replay":
        keys = [f"replay-{job.door}-{job.index}-{uuid.uuid4().hex}" for _ in range(REPLAY_KEYS)]
    # Warm-up (pools, the runtime) and the replay keys, all before the clock starts.
    warm = [f"warm-{job.door}-{job.index}-{uuid.uuid4().hex}" for _ in range(20)]
    for n, key in enumerate(warm + keys):
        if job.door == "python":  # the other doors take the same HTTP request
            from jobwarden.tasks.intake import submit_operation

            submit_operation(
                tenant=TENANT,
                provider=PROVIDER,
                idempotency_key=key,
                command=_command(n - len(warm)),
                requested_by="bench",
            )
        else:
            body = json.dumps({"provider": PROVIDER, "command": _command(n - len(warm))})
            conn.request(
                "POST",
                "/v1/operations",
                body.encode(),
                {
                    "Authorization": f"Bearer {job.token}",
                    "Content-Type": "application/json",
                    "Idempotency-Key": key,
                },
            )
            conn.getresponse().read()
    ready.put(job.index)
    go.wait(timeout=600)
    cpu0 = time.process_time()
    started = time.perf_counter()
    deadline = started + job.seconds
    if job.door == "python":
        samples, errors = _in_process(job, keys, deadline)
    else:
        samples, errors = _over_http(job, keys, deadline, conn)
    elapsed = time.perf_counter() - started
    out.put((samples, errors, elapsed, time.process_time() - cpu0))
    conn.close()


@dataclass(frozen=True, slots=True)
class Figures:
    rate: float
    p50_ms: float
    p99_ms: float
    errors: int
    client_cpu_ms: float  # per submission, all client processes
    server_cpu_ms: float | None  # per submission, uvicorn's processes (HTTP only)
    statements: float  # Postgres statements per submission, counted by the probe


def _phase(ctx: Any, phase: tuple[str, str, int], args: argparse.Namespace, server: Any) -> Figures:
    """Run ``procs`` clients of one door and mode at once; their samples pooled.

    ``server``: the process group serving the door (None in-process)."""
    door, mode, procs = phase
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    port, token = args.ports[door], args.tokens[door]
    workers = [
        ctx.Process(
            target=_client,
            args=(Job(door, mode, args.seconds, i, port, token), ready, go, out),
        )
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    _collect(ready, workers, 300)
    time.sleep(PROBE_FLUSH)  # the warm-up's statements counted before the clock starts
    statements_before = _statements(args, door)
    server_before = group_cpu(server.pid) if server else {}
    go.set()
    results = _collect(out, workers, args.seconds + 120)
    server_after = group_cpu(server.pid) if server else {}
    time.sleep(PROBE_FLUSH)
    statements = _statements(args, door) - statements_before
    for w in workers:
        w.join(30)
    samples = sorted(s for r in results for s in r[0])
    count = len(samples)
    elapsed = max(r[2] for r in results)
    p99 = samples[min(count - 1, round(0.99 * (count - 1)))]
    return Figures(
        rate=count / elapsed,
        p50_ms=statistics.median(samples) * 1000,
        p99_ms=p99 * 1000,
        errors=sum(r[1] for r in results),
        client_cpu_ms=sum(r[3] for r in results) / count * 1000,
        server_cpu_ms=(cpu_delta(server_before, server_after) / count * 1000) if server else None,
        statements=statements / count,
    )


PROBE_FLUSH = 0.7  # seconds: the probes flush their counters every 0.25 s


def _probe_prefix(door: str) -> str:
    return f"{os.environ['JOBWARDEN_KEY_PREFIX']}:probe:{door}"


def _statements(args: argparse.Namespace, door: str) -> int:
    """Postgres statements the door's processes have sent so far (their probe's total)."""
    from redis import Redis

    with Redis.from_url(args.redis_url) as redis:
        return int(redis.get(f"{_probe_prefix(door)}:pg") or 0)


def _probe_env(door: str, site: Path, code: Path = REPO) -> dict[str, str]:
    """What a server process needs to load the probe at start (through ``site``), with
    ``code`` ahead of the installed jobwarden (an editable install yields to PYTHONPATH)."""
    return {
        "PYTHONPATH": f"{site}:{REPO / 'scripts'}:{code}",
        "BENCH_PROBE_REDIS_URL": os.environ["JOBWARDEN_REDIS_URL"],
        "BENCH_PROBE_PREFIX": _probe_prefix(door),
    }


SITECUSTOMIZE = """\
# Written by scripts/bench_intake.py: every Python process of a door's server (uvicorn
# spawns its workers) counts its Postgres statements from the start.
import os

if os.environ.get("BENCH_PROBE_REDIS_URL"):
    import _bench_probe

    _bench_probe.install(os.environ["BENCH_PROBE_REDIS_URL"], os.environ["BENCH_PROBE_PREFIX"])
"""


def _collect(queue: Any, workers: list[Any], timeout: float) -> list[Any]:
    """One message per client process; a client that died fails the run at once."""
    import queue as queues

    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < len(workers):
        try:
            got.append(queue.get(timeout=0.5))
        except queues.Empty:
            dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for w in workers:
                    w.kill()
                raise RuntimeError(f"a client process failed (exit codes {dead})") from None
    return got


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start_api(args: argparse.Namespace, logs: Path, door: str = "http") -> subprocess.Popen[bytes]:
    """``jobwarden api`` on ``door``'s port: this checkout's code, or ``--baseline``'s."""
    code = args.baseline if door == "base" else REPO
    env = {
        **os.environ,
        **_probe_env(door, args.site, code),
        "JOBWARDEN_API_PORT": str(args.ports[door]),
    }
    if args.api_workers is not None:
        env["JOBWARDEN_API_WORKERS"] = str(args.api_workers)
    if args.token_cache_seconds is not None:
        env["JOBWARDEN_API_TOKEN_CACHE_SECONDS"] = str(args.token_cache_seconds)
    jobwarden = Path(sys.executable).parent / "jobwarden"
    with logs.open("ab") as log:
        return subprocess.Popen(
            [str(jobwarden), "api"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
            start_new_session=True,
        )


def _start_floor(
    args: argparse.Namespace, door: str, url: str, logs: Path
) -> subprocess.Popen[bytes]:
    """A FastAPI floor (``door``: "floor", the bare one, or "honest") under uvicorn as
    ``jobwarden api`` runs (httptools, no access log)."""
    import importlib

    import psycopg

    module = "_intake_floor" if door == "floor" else "_intake_floor_honest"
    floor = importlib.import_module(module)
    dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(floor.SCHEMA)
        if door == "honest":  # its token lives in its table, hashed
            conn.execute(floor.TOKEN_ROW, (floor.token_hash(args.tokens[door]), TENANT, ["submit"]))
    env = {
        **os.environ,
        **_probe_env(door, args.site),
        "BENCH_INTAKE_FLOOR_DSN": dsn,
        "BENCH_INTAKE_FLOOR_TOKEN": args.tokens[door],
        "BENCH_INTAKE_FLOOR_BROKER": os.environ["JOBWARDEN_BROKER_URL"],
        "BENCH_INTAKE_FLOOR_PREFIX": f"{os.environ['JOBWARDEN_KEY_PREFIX']}-{door}",
    }
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        f"{module}:create_app",
        "--factory",
        *("--host", "127.0.0.1", "--port", str(args.ports[door])),
        *("--workers", str(args.workers_used)),
        *("--http", "httptools", "--no-access-log", "--log-level", "warning"),
    ]
    with logs.open("ab") as log:
        return subprocess.Popen(
            command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
            start_new_session=True,
        )


def _healthy(port: int, proc: subprocess.Popen[bytes], log: Path) -> bool:
    import http.client

    if proc.poll() is not None:
        raise RuntimeError(f"jobwarden api exited:\n{log.read_text()[-3000:]}")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", "/healthz")
        ok = conn.getresponse().status == 200
        conn.close()
    except OSError:
        return False
    return ok


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def _line(label: str, f: Figures) -> str:
    server = f"  server {f.server_cpu_ms:5.2f}" if f.server_cpu_ms is not None else ""
    errors = f"  ERRORS {f.errors}" if f.errors else ""
    return (
        f"  {label:<11} {f.rate:8.0f}/s  p50 {f.p50_ms:6.2f}  p99 {f.p99_ms:6.2f}"
        f"  cpu/sub: clients {f.client_cpu_ms:5.2f}{server}"
        f"  pg statements/sub {f.statements:5.2f}{errors}"
    )


def _report(table: dict[tuple[str, str, int], Figures], args: argparse.Namespace) -> bool:
    met = True
    print(
        f"\nintake: {args.seconds:g} s per phase, uvicorn workers {args.workers_used}, "
        f"token cache {args.cache_used:g} s, "
        f"{os.cpu_count()} CPUs; latency in ms, CPU in ms per submission"
    )
    for mode in ("new", "replay"):
        for procs in args.procs:
            floor, http = table[("python", mode, procs)], table[("http", mode, procs)]
            fastapi = table[("floor", mode, procs)]
            honest = table[("honest", mode, procs)]
            label = "new keys" if mode == "new" else "replays"
            print(f"{label}, {procs} process{'es' if procs > 1 else ''}:")
            print(_line("in-process", floor))
            print(_line("HTTP", http))
            base = table.get(("base", mode, procs))
            if base is not None:
                print(_line("baseline", base))
            print(_line("FastAPI", fastapi))
            print(_line("honest", honest))
            print(
                f"  HTTP / in-process: {http.rate / floor.rate:.2f}"
                f"   HTTP / FastAPI floor: {http.rate / fastapi.rate:.2f}"
                f"   HTTP / honest floor: {http.rate / honest.rate:.2f} (issue 37's figure)"
                f"   honest / FastAPI floor: {honest.rate / fastapi.rate:.2f}"
            )
            if base is not None:
                print(
                    f"  HTTP / baseline: {http.rate / base.rate:.2f}"
                    f"   baseline / honest floor: {base.rate / honest.rate:.2f}"
                    + (
                        f"   server CPU per submission, HTTP / baseline: "
                        f"{http.server_cpu_ms / base.server_cpu_ms:.2f}"
                        if http.server_cpu_ms and base.server_cpu_ms
                        else ""
                    )
                )
    if 4 in args.procs:
        print("issue 10 targets (four processes):")
        for mode in ("new", "replay"):
            floor, http = table[("python", mode, 4)], table[("http", mode, 4)]
            checks = [
                (f"HTTP >= 0.7 x in-process ({mode})", http.rate >= 0.7 * floor.rate),
                (f"HTTP p99 < 25 ms ({mode})", http.p99_ms < 25),
            ]
            if mode == "new":
                checks.append(("in-process floor >= 600/s (new keys)", floor.rate >= 600))
            for what, ok in checks:
                met &= ok
                print(f"  {'met' if ok else 'MISSED'}: {what}")
        defaults = args.api_workers is None and args.token_cache_seconds is None
        http, fastapi = table[("http", "new", 4)], table[("floor", "new", 4)]
        print(
            "issue 23 targets (four processes, new keys"
            + (", the defaults):" if defaults else "; NOT the defaults, as issue 23 asks):")
        )
        for what, ok in (
            ("HTTP >= 0.85 x the FastAPI floor", http.rate >= 0.85 * fastapi.rate),
            ("HTTP p99 < 25 ms", http.p99_ms < 25),
        ):
            met &= ok
            print(f"  {'met' if ok else 'MISSED'}: {what}")
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each phase")
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 4], help="client processes")
    parser.add_argument(
        "--only",
        choices=DOORS,
        nargs="+",
        default=None,
        help="run only these doors (no ratios printed): to profile one server under load",
    )
    parser.add_argument("--modes", choices=("new", "replay"), nargs="+", default=["new", "replay"])
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a checkout of an earlier commit (git worktree add DIR REF) whose API runs as "
        "door 'base' beside this one, phase after phase, on this tree's schema: before and "
        "after in one run, as a noisy machine needs",
    )
    parser.add_argument(
        "--api-workers", type=int, default=None, help="uvicorn workers (default: settings)"
    )
    parser.add_argument(
        "--token-cache-seconds",
        type=float,
        default=None,
        help="JOBWARDEN_API_TOKEN_CACHE_SECONDS for the server (default: settings)",
    )
    parser.add_argument(
        "--admin-url",
        default=os.environ.get(
            "JOBWARDEN_TEST_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
        help="a Postgres URL allowed to CREATE DATABASE (env JOBWARDEN_TEST_ADMIN_URL)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("JOBWARDEN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
    )
    args = parser.parse_args()

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    run = secrets.token_hex(4)
    name = f"jobwarden_bench_intake_{run}"
    url = make_url(args.admin_url).set(database=name).render_as_string(hide_password=False)
    prefix = f"jwbench-intake-{run}"
    # Set before jobwarden reads its settings (the Celery app reads them at import);
    # the spawned client processes and `jobwarden api` inherit them.
    os.environ.update(
        JOBWARDEN_DATABASE_URL=url,
        JOBWARDEN_REDIS_URL=args.redis_url,
        JOBWARDEN_BROKER_URL=args.redis_url,
        JOBWARDEN_KEY_PREFIX=prefix,
        JOBWARDEN_QUEUE=prefix,
    )
    admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    logs = Path(f"/tmp/bench_intake_{run}.log")
    server: subprocess.Popen[bytes] | None = None
    floors: dict[str, subprocess.Popen[bytes]] = {}
    args.site = Path(tempfile.mkdtemp(prefix=f"bench_intake_{run}_site_"))
    (args.site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        from jobwarden.api.auth import Scope, create_token
        from jobwarden.config.settings import get_settings
        from jobwarden.models.persistence.migrate import upgrade

        upgrade(url)
        args.tokens = {
            "python": "",
            "http": create_token(url, tenant=TENANT, name="bench", scopes=[Scope.submit]).token,
            "floor": secrets.token_urlsafe(24),
            "honest": secrets.token_urlsafe(24),
        }
        args.tokens["base"] = args.tokens["http"]
        args.ports = {door: _free_port() for door in ("http", "base", "floor", "honest")}
        args.ports["python"] = args.ports["http"]  # its clients open (and never use) one
        args.workers_used = args.api_workers or get_settings().api_workers
        args.cache_used = (
            get_settings().api_token_cache_seconds
            if args.token_cache_seconds is None
            else args.token_cache_seconds
        )
        server = _start_api(args, logs)
        for door in ("floor", "honest"):
            floors[door] = _start_floor(args, door, url, logs)
        if args.baseline is not None:
            floors["base"] = _start_api(args, logs, "base")
        servers = {"python": None, "http": server, **floors}
        doors = list(args.only or DOORS)
        if args.baseline is not None:
            doors.insert(doors.index("http") + 1 if "http" in doors else 0, "base")
        for door in [d for d in doors if d != "python"]:
            process = servers[door]
            assert process is not None
            wait_until(
                lambda port=args.ports[door], proc=process: _healthy(port, proc, logs),
                60,
                f"{door} /healthz",
            )
        ctx = mp.get_context("spawn")
        table: dict[tuple[str, str, int], Figures] = {}
        for mode in args.modes:
            for procs in args.procs:
                # The floors and the HTTP path back to back, so all see the same machine.
                for door in doors:
                    phase = (door, mode, procs)
                    table[phase] = figures = _phase(ctx, phase, args, servers[door])
                    print(_line(f"{door} {mode} x{procs}", figures), flush=True)
        complete = args.only is None and len(args.modes) == 2
        met = _report(table, args) if complete else True
    finally:
        for process in (server, *floors.values()):
            if process is not None:
                _stop(process)
        shutil.rmtree(args.site, ignore_errors=True)
        from redis import Redis

        from jobwarden.models.persistence.db import dispose_all

        dispose_all()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
        redis = Redis.from_url(args.redis_url)
        # Only this run's keys: the prefix holds a random run id.
        for key in redis.scan_iter(f"*{prefix}*", count=1000):
            redis.delete(key)
        redis.close()
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
