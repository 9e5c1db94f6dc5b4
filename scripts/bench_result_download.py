"""Memory and throughput of GET /v1/operations/{id}/result: a large result downloaded.

Issue 21's must-show: a 2 GB download from the API with its RSS growth. This writes
--gib GiB of generated 1 MiB chunks into a ``file://`` result store of its own through
``ResultStore.put_stream``, records the result row in a scratch database of its own
(migrated, dropped at the end whatever happens), starts the API in a separate process
(uvicorn, one process, so its /proc/<pid>/status is the server's whole memory), warms it
with a one-byte ranged GET, and then downloads the whole result with a streaming client
that counts and hashes the bytes. It prints the throughput and the API process's RSS
before, after and at its peak (VmHWM, reset after the warm-up) and exits 1 when the
growth passes --limit-mb or the bytes' sha256 is not the recorded one. Linux only.

    .venv/bin/python scripts/bench_result_download.py --gib 2
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from _bench_support import wait_until  # noqa: E402

MIB = 1024 * 1024
TENANT = "bench"


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def _chunks(total: int, blocks: list[bytes]) -> Iterator[bytes]:
    # A few distinct pre-made blocks, cycled: generating is not what is measured.
    for n in range(total // MIB):
        yield blocks[n % len(blocks)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start_api(port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "jobwarden.api.app:create_app",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    with log.open("ab") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, cwd=str(REPO), start_new_session=True
        )


def _healthy(port: int, proc: subprocess.Popen[bytes], log: Path) -> bool:
    import http.client

    if proc.poll() is not None:
        raise RuntimeError(f"the API exited:\n{log.read_text()[-3000:]}")
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


def _record(url: str, op_id: uuid.UUID, stored: object) -> None:
    """The operation (succeeded) and its result row, as collection writes them."""
    from jobwarden.models.persistence.db import transaction
    from jobwarden.models.persistence.tables import ResultRow
    from jobwarden.models.results.objects import StoredObject
    from jobwarden.models.states import OperationState as S
    from tests.integration.api_helpers import insert_operation  # one intent event, chained

    assert isinstance(stored, StoredObject)

    now = datetime.now(UTC)
    insert_operation(
        url, TENANT, S.succeeded, operation_id=op_id, result_deadline=now + timedelta(hours=1)
    )
    with transaction(url) as session:
        session.add(
            ResultRow(
                operation_id=op_id,
                content=None,
                location=stored.location,
                content_type="application/x-ndjson",
                sha256=stored.sha256,
                size_bytes=stored.size,
                record_count=None,
                failed_items=None,
                collected_at=now,
            )
        )


def _download(port: int, path: str, token: str) -> tuple[str, int, float]:
    import httpx

    running, size = hashlib.sha256(), 0
    headers = {"Authorization": f"Bearer {token}"}
    started = time.perf_counter()
    with (
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
        client.stream("GET", path, headers=headers) as answer,
    ):
        if answer.status_code != 200:
            raise RuntimeError(f"GET {path}: {answer.status_code} {answer.read()[:300]!r}")
        for chunk in answer.iter_bytes(MIB):
            running.update(chunk)
            size += len(chunk)
    return running.hexdigest(), size, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="result size in GiB")
    parser.add_argument("--limit-mb", type=int, default=64, help="allowed RSS growth (MiB)")
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
    total = int(args.gib * 1024) * MIB

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    run = secrets.token_hex(4)
    name = f"jobwarden_bench_download_{run}"
    url = make_url(args.admin_url).set(database=name).render_as_string(hide_password=False)
    results = Path(tempfile.gettempdir()) / f"jwbench-results-{run}"
    # Set before jobwarden reads its settings; the API process inherits them.
    os.environ.update(
        JOBWARDEN_DATABASE_URL=url,
        JOBWARDEN_REDIS_URL=args.redis_url,
        JOBWARDEN_BROKER_URL=args.redis_url,
        JOBWARDEN_KEY_PREFIX=f"jwbench-download-{run}",
        JOBWARDEN_QUEUE=f"jwbench-download-{run}",
        JOBWARDEN_RESULT_STORE=results.as_uri(),
    )
    admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    log = Path(tempfile.gettempdir()) / f"bench_result_download_{run}.log"
    server: subprocess.Popen[bytes] | None = None
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        from jobwarden.api.auth import Scope, create_token
        from jobwarden.models.persistence.migrate import upgrade
        from jobwarden.models.results.objects import object_key
        from jobwarden.tasks.results.store import ResultStore

        upgrade(url)
        token = create_token(url, tenant=TENANT, name="bench", scopes=[Scope.read]).token
        op_id = uuid.uuid4()
        blocks = [secrets.token_bytes(MIB) for _ in range(4)]
        started = time.perf_counter()
        store = ResultStore.from_url(results.as_uri())
        stored = store.put_stream(
            object_key(TENANT, str(op_id)), _chunks(total, blocks), max_bytes=total
        )
        put_seconds = time.perf_counter() - started
        _record(url, op_id, stored)

        port = _free_port()
        server = _start_api(port, log)
        wait_until(lambda: _healthy(port, server, log), 60, "the API's /healthz")
        path = f"/v1/operations/{op_id}/result"
        # Warm-up: the runtime, the token lookup and the store are built on first use, and
        # the object is checked against its digest (api/result_checks.py: once per process).
        pid = server.pid
        warm_before = _status_kb(pid, "VmRSS")
        warm_started = time.perf_counter()
        _warm(port, path, token)
        warm_seconds = time.perf_counter() - warm_started
        warm_peak = _status_kb(pid, "VmHWM")
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)
        before = _status_kb(pid, "VmRSS")
        sha256, size, seconds = _download(port, path, token)
        after, peak = _status_kb(pid, "VmRSS"), _status_kb(pid, "VmHWM")
    finally:
        if server is not None:
            _stop(server)
        from jobwarden.models.persistence.db import dispose_all

        dispose_all()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
        shutil.rmtree(results, ignore_errors=True)
    growth_mib = (peak - before) / 1024
    print(
        f"first request (a one-byte range; the object's check): {warm_seconds:.2f} s, "
        f"RSS growth to peak {(warm_peak - warm_before) / 1024:.1f} MiB"
    )
    print(f"result: {size / MIB:.0f} MiB written by put_stream in {put_seconds:.1f} s")
    print(
        f"download: {size} bytes in {seconds:.2f} s = {size / MIB / seconds:.0f} MiB/s; "
        f"sha256 {'matches' if sha256 == stored.sha256 else 'DIFFERS'}"
    )
    print(
        f"API process RSS: before {before / 1024:.1f} MiB, after {after / 1024:.1f} MiB, "
        f"peak {peak / 1024:.1f} MiB; growth to peak {growth_mib:.1f} MiB "
        f"(limit {args.limit_mb} MiB)"
    )
    ok = sha256 == stored.sha256 and size == stored.size and growth_mib <= args.limit_mb
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


def _warm(port: int, path: str, token: str) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {token}", "Range": "bytes=0-0"}
    answer = httpx.get(f"http://127.0.0.1:{port}{path}", headers=headers, timeout=60)
    if answer.status_code != 206:
        raise RuntimeError(f"warm-up GET {path}: {answer.status_code} {answer.text[:300]}")


if __name__ == "__main__":
    sys.exit(main())
