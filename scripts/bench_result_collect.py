"""Memory and throughput of result collection: a --gib GiB JSON Lines result collected by
a real Celery worker into the result store (issue 21; DESIGN invariant 14).

The must-show: a 2 GB result collected through a real worker into the object store with
the worker's RSS growth <= 64 MiB. This starts what the acceptance tests start, on its
own: a scratch database (migrated, dropped at the end), the sandbox provider (in this
process) serving an OpenAI Batch output file of generated lines (behaviour
``result_lines``: never held by the sandbox, its sha256 taken at create), a providers
folder holding one contract, ``sandbox_lines`` (the shipped sandbox contract whose
``[result]`` reads JSON Lines as the OpenAI Batch convention does, its bound above the
result and its request timeout long enough for the download), a ``file://`` result
store in a temporary folder, ONE Celery worker (prefork, concurrency 1) and a beat.

It submits one operation and samples the worker's pool child (the process that runs the
tasks) every 0.2 s: VmRSS, and VmHWM reset at submission. It prints the end state, the
download's duration and throughput (the sandbox's own log times the result request), the
child's RSS just before the result request and its peak during it, the growth, and
whether the stored object (re-read from the store) has the sha256 the sandbox advertised.
Exits 1 when the operation did not succeed, a digest differs or the growth exceeds
--limit-mb. Redis keys live under a private prefix and are deleted; Linux only (/proc).

    .venv/bin/python scripts/bench_result_collect.py --gib 2
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MIB = 1024 * 1024
GIB = 1024 * MIB
PROVIDER = "sandbox_lines"
SAMPLE_SECONDS = 0.2


# -- the contract ------------------------------------------------------------------------

_RESULT_TABLE = """[result]
# The OpenAI Batch convention's rule (openai_batch.toml), on the sandbox's result route and
# with the sandbox's digest in the status body.
fetch = "url"
content_type = "application/jsonl"
jsonl = true
checksum_pointer = "/result/sha256"
item_error_pointer = "/error"
item_status_code_pointer = "/response/status_code"
item_ref_pointer = "/custom_id"
completed_count_pointer = "/request_counts/completed"
failed_count_pointer = "/request_counts/failed"
total_count_pointer = "/request_counts/total"
max_bytes = {max_bytes}

"""


def write_contract(directory: Path, *, max_bytes: int, request_timeout: int) -> None:
    """The shipped sandbox contract as ``sandbox_lines``: a JSON Lines [result] bounded at
    ``max_bytes`` and every request (the download too) bounded at ``request_timeout``."""
    text = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    text = text.replace('name = "sandbox"', f'name = "{PROVIDER}"', 1)
    head, rest = text.split("[result]\n", 1)
    text = head + _RESULT_TABLE.format(max_bytes=max_bytes) + rest[rest.index("[poll]") :]
    # A create may not be bounded longer than its deadline allows (contract validation).
    for key, value in (
        ("request_timeout_seconds", request_timeout),
        ("create_deadline_seconds", request_timeout),
    ):
        text, count = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        assert count == 1, key
    (directory / f"{PROVIDER}.toml").write_text(text)


# -- the worker's memory -----------------------------------------------------------------


def status_kb(pid: int, name: str) -> int | None:
    """A ``/proc/<pid>/status`` field in KiB (None when the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    for line in text.splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    return None


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The worker's pool processes: a prefork worker's children run its tasks."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(child) for child in text.split()]


def reset_peak(pid: int) -> bool:
    """Make VmHWM the current RSS (Linux >= 4.0); False where that is not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass
class Sampler:
    """VmRSS and VmHWM of one process every SAMPLE_SECONDS, on a thread, until stopped or
    ``seconds`` have passed."""

    pid: int
    seconds: float
    # (monotonic, VmRSS KiB, VmHWM KiB, CPU seconds)
    samples: list[tuple[float, int, int, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            rss, hwm = status_kb(self.pid, "VmRSS"), status_kb(self.pid, "VmHWM")
            if rss is None or hwm is None:
                return  # the child is gone: the figures say so
            self.samples.append((time.monotonic(), rss, hwm, cpu_seconds(self.pid)))
            if self._stop.wait(SAMPLE_SECONDS):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


# -- the run -----------------------------------------------------------------------------


def _wait(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="result size in GiB")
    parser.add_argument("--line-bytes", type=int, default=1024, help="bytes per JSON line")
    parser.add_argument("--limit-mb", type=float, default=64.0, help="allowed RSS growth (MiB)")
    parser.add_argument(
        "--request-timeout", type=int, default=600, help="the contract's request timeout (s)"
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="wait for the end (s)")
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
    lines = int(args.gib * GIB) // args.line_bytes
    total = lines * args.line_bytes
    from jobwarden.models.contracts.fields import MAX_RESULT_BYTES

    # The bound sits above the result (a quarter more), never above what a contract may say.
    max_bytes = min(MAX_RESULT_BYTES, total + total // 4 + MIB)
    if lines < 1 or total > max_bytes:
        parser.error(f"--gib gives {total} bytes: from one line up to {MAX_RESULT_BYTES}")

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    run = secrets.token_hex(4)
    database = f"jobwarden_bench_collect_{run}"
    url = make_url(args.admin_url).set(database=database).render_as_string(hide_password=False)
    prefix = f"jwbench-collect-{run}"
    scratch = Path(tempfile.mkdtemp(prefix="jobwarden-bench-collect-"))
    providers, results, logs = scratch / "providers", scratch / "results", scratch / "logs"
    for folder in (providers, logs):
        folder.mkdir()
    token = secrets.token_hex(12)
    env = {
        "JOBWARDEN_DATABASE_URL": url,
        "JOBWARDEN_REDIS_URL": args.redis_url,
        "JOBWARDEN_BROKER_URL": args.redis_url,
        "JOBWARDEN_KEY_PREFIX": prefix,
        "JOBWARDEN_QUEUE": prefix,
        "JOBWARDEN_PROVIDERS_DIR": str(providers),
        "JOBWARDEN_RESULT_STORE": results.as_uri(),
        "JOBWARDEN_SANDBOX_TOKEN": token,
        # check_request_bounds: two requests of the contract's timeout, plus its margin.
        "JOBWARDEN_LEASE_TTL_SECONDS": str(2 * args.request_timeout + 5),
        "JOBWARDEN_SWEEP_INTERVAL_SECONDS": "1",
    }
    # Set before jobwarden reads its settings; the worker and beat inherit them.
    os.environ.update(env)
    write_contract(providers, max_bytes=max_bytes, request_timeout=args.request_timeout)

    from jobwarden.demo.harness import Stack
    from jobwarden.demo.sandbox.server import SandboxServer

    admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    sandbox: SandboxServer | None = None
    stack: Stack | None = None
    sampler: Sampler | None = None
    ok = False
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{database}"'))
    try:
        from jobwarden.models.persistence.migrate import upgrade

        upgrade(url)
        sandbox = SandboxServer(token=token)
        sandbox.start()
        os.environ["JOBWARDEN_SANDBOX_URL"] = env["JOBWARDEN_SANDBOX_URL"] = sandbox.url
        stack = Stack(env, log_dir=logs)
        worker = stack.start_worker("bench", concurrency=1)
        stack.start_beat()
        stack.wait_ready("bench", timeout=120)
        child = _wait(lambda: children(worker.pid), 30, "the worker's pool child")[0]
        print(
            f"result: {total / GIB:.3f} GiB = {lines:,} JSON lines of {args.line_bytes} bytes;"
            f" worker pid {worker.pid}, pool child {child} (concurrency 1)",
            flush=True,
        )
        sampler = Sampler(child, args.timeout + 60)
        args.lines, args.total = lines, total
        ok = _run(args, sandbox, sampler)
    finally:
        if sampler is not None:
            sampler.stop()
        if stack is not None:
            if not ok:
                print(stack.logs()[-3000:])
            stack.stop()
        if sandbox is not None:
            sandbox.stop()
        _cleanup(admin, database, args.redis_url, prefix)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if ok else 1


def _run(args: argparse.Namespace, sandbox: Any, sampler: Sampler) -> bool:
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import transaction
    from jobwarden.models.states import AUTOMATION_STOPPED, TERMINAL
    from jobwarden.tasks.intake import submit_operation

    stopped = {s.value for s in TERMINAL | AUTOMATION_STOPPED}
    url = os.environ["JOBWARDEN_DATABASE_URL"]
    lines, total = args.lines, args.total
    hwm_reset = reset_peak(sampler.pid)
    rss_submit = status_kb(sampler.pid, "VmRSS") or 0
    sampler.start()
    submitted = time.monotonic()
    answer = submit_operation(
        tenant="bench",
        provider=PROVIDER,
        idempotency_key=f"bench-collect-{secrets.token_hex(4)}",
        command={
            "kind": "export",
            "behaviour": {
                "polls_to_finish": 1,
                "result_lines": lines,
                "result_line_bytes": args.line_bytes,
            },
        },
        requested_by="bench",
    )
    assert answer.operation_id is not None, answer
    op = uuid.UUID(str(answer.operation_id))

    def ended() -> Any:
        with transaction(url) as session:
            row = store.load(session, op)
        return row if row is not None and row.state in stopped else None

    row = _wait(ended, args.timeout, f"operation {op} to stop")
    seen_end = time.monotonic()
    sampler.stop()

    downloads = [r for r in sandbox.requests(job_id=row.remote_job_id) if r["kind"] == "result"]
    fetched = next((r for r in reversed(downloads) if r.get("status") == 200), None)
    print(f"end state: {row.state} ({len(downloads)} result request(s))")
    if row.state != "succeeded":
        print(f"  validation: {row.validation_summary}")
    if fetched is None:
        print("no result request was answered 200")
        return False
    start, finish = fetched["monotonic"], fetched.get("ended") or seen_end
    download = finish - start
    print(
        f"download: {download:.1f} s, {total / MIB / download:.1f} MiB/s"
        f" (request sent {start - submitted:.1f} s after submission;"
        f" operation seen {row.state} {seen_end - start:.1f} s after the request,"
        f" polled every {SAMPLE_SECONDS} s)"
    )
    growth = _memory(sampler, rss_submit, hwm_reset, (start, finish), args.limit_mb)
    digest_ok = _digests(sandbox, row, op, total, url)
    ok = row.state == "succeeded" and digest_ok and growth <= args.limit_mb
    print("PASS" if ok else "FAIL")
    return ok


def _memory(
    sampler: Sampler, rss_submit: int, hwm_reset: bool, window: tuple[float, float], limit: float
) -> float:
    """Print the pool child's memory around the download (``window``: when its request
    started and ended); return the growth in MiB."""
    start, finish = window
    samples = sampler.samples
    before = next((rss for t, rss, _, _ in reversed(samples) if t <= start), rss_submit)
    inside = [s for s in samples if start <= s[0] <= finish + SAMPLE_SECONDS]
    during = [rss for _, rss, _, _ in inside]
    peak = max(during, default=before)
    hwm = samples[-1][2] if samples else 0
    # VmHWM (reset at submission) catches a peak between two samples.
    growth = (max(peak, hwm if hwm_reset else 0) - before) / 1024
    print(
        f"worker pool child RSS: {rss_submit / 1024:.1f} MiB at submission,"
        f" {before / 1024:.1f} MiB just before the download,"
        f" sampled peak during it {peak / 1024:.1f} MiB ({len(during)} samples),"
        f" VmHWM since submission {hwm / 1024:.1f} MiB"
        f"{'' if hwm_reset else ' (not reset: since the child started)'}"
    )
    if inside:
        # Flat or climbing: the RSS at each tenth of the download.
        tenths = [during[min(len(during) - 1, len(during) * k // 10)] for k in range(11)]
        cpu = inside[-1][3] - inside[0][3]
        print(
            f"  RSS through the download, each tenth (MiB): "
            f"{' '.join(f'{kb / 1024:.0f}' for kb in tenths)};"
            f" child CPU {cpu:.1f} s over {inside[-1][0] - inside[0][0]:.1f} s"
        )
    print(
        f"RSS growth over the download: {growth:.1f} MiB (limit {limit:g}):"
        f" {'ok' if growth <= limit else 'OVER'}"
    )
    return growth


def _digests(sandbox: Any, row: Any, op: uuid.UUID, total: int, url: str) -> bool:
    """The sandbox's advertised sha256 against the row's and the stored object's, re-read."""
    import httpx

    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence import result_rows
    from jobwarden.models.persistence.db import transaction
    from jobwarden.tasks.results.store import ResultStore

    token = os.environ["JOBWARDEN_SANDBOX_TOKEN"]
    status = httpx.get(
        f"{sandbox.url}/v1/jobs/{row.remote_job_id}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ).json()
    advertised = (status.get("result") or {}).get("sha256")
    with transaction(url) as session:
        found = result_rows.result_of(session, op)
    if found is None or found.location is None:
        print(f"stored: nothing (row {found})")
        return False
    started = time.perf_counter()
    running, size = hashlib.sha256(), 0
    for chunk in ResultStore.from_url(get_settings().result_store).read(found.location):
        running.update(chunk)
        size += len(chunk)
    seconds = time.perf_counter() - started
    reread = running.hexdigest()
    same = reread == advertised == found.sha256 and size == found.size_bytes == total
    print(
        f"stored object {found.location}: {size:,} bytes, re-read in {seconds:.1f} s;"
        f" sha256 {reread[:16]}…, sandbox advertised {str(advertised)[:16]}…,"
        f" row {found.sha256[:16]}…: {'equal' if same else 'DIFFERENT'}"
    )
    return same


def _cleanup(admin: Any, database: str, redis_url: str, prefix: str) -> None:
    """Drop the scratch database and this run's Redis keys (the prefix holds a run id)."""
    from redis import Redis
    from sqlalchemy import text

    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.tasks.runtime import reset

    reset()
    dispose_all()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
    admin.dispose()
    with contextlib.closing(Redis.from_url(redis_url)) as redis:
        for key in redis.scan_iter(f"{prefix}*", count=1000):
            redis.delete(key)


if __name__ == "__main__":
    sys.exit(main())
