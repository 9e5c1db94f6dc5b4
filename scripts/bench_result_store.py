"""Memory and throughput of the result store: a large result streamed into each store.

Invariant 14 and issue 21 ask for constant memory: a result streams into the store, its
digest computed on the way, never held whole. This streams --gib GiB of generated 1 MiB
chunks through ``ResultStore.put_stream`` into a ``file://`` directory and into an S3
store (moto's standalone server in a subprocess, so its memory is not counted; see
tests/s3_server.py), then reads it back through ``verify``. For each it prints the
throughput and this process's peak RSS growth (VmHWM, reset before each scenario, over
the RSS before it) and exits 1 when a growth exceeds --limit-mb. Linux only (/proc/self).

    .venv/bin/python scripts/bench_result_store.py --gib 1
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MIB = 1024 * 1024


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    """Make VmHWM the current RSS (Linux >= 4.0)."""
    Path("/proc/self/clear_refs").write_text("5")


def _chunks(total: int, blocks: list[bytes]) -> Iterator[bytes]:
    # A few distinct pre-made blocks, cycled: generating is not what is measured.
    for n in range(total // MIB):
        yield blocks[n % len(blocks)]


def _scenario(name: str, store: object, total: int, blocks: list[bytes], limit_mb: int) -> bool:
    from jobwarden.models.results.objects import object_key
    from jobwarden.tasks.results.store import ResultStore

    assert isinstance(store, ResultStore)
    expected = hashlib.sha256()
    for chunk in _chunks(total, blocks):
        expected.update(chunk)
    _reset_peak()
    before = _status_kb("VmRSS")
    started = time.perf_counter()
    stored = store.put_stream(object_key("bench", name), _chunks(total, blocks), max_bytes=total)
    put_seconds = time.perf_counter() - started
    put_peak = _status_kb("VmHWM")
    started = time.perf_counter()
    problem = store.verify(stored)
    verify_seconds = time.perf_counter() - started
    peak = _status_kb("VmHWM")
    growth_mb = (peak - before) / 1024
    ok = stored.sha256 == expected.hexdigest() and problem is None and growth_mb <= limit_mb
    print(
        f"{name:5} {total / MIB:7.0f} MiB  put {total / MIB / put_seconds:7.1f} MiB/s"
        f"  verify {total / MIB / verify_seconds:7.1f} MiB/s"
        f"  RSS before {before / 1024:6.1f} MiB, peak growth put {(put_peak - before) / 1024:5.1f}"
        f" / verify {growth_mb:5.1f} MiB (limit {limit_mb})"
        f"  digest {'ok' if stored.sha256 == expected.hexdigest() else 'WRONG'}"
        f"  verify {problem or 'ok'}  {'PASS' if ok else 'FAIL'}"
    )
    store.delete(stored.location)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="result size per store")
    parser.add_argument("--limit-mb", type=int, default=64, help="allowed peak RSS growth")
    parser.add_argument("--skip-s3", action="store_true", help="only the file:// store")
    args = parser.parse_args()
    total = int(args.gib * 1024) * MIB

    from jobwarden.tasks.results.store import ResultStore
    from tests.s3_server import S3Server

    blocks = [hashlib.sha256(bytes([n])).digest() * (MIB // 32) for n in range(4)]
    results = []
    with tempfile.TemporaryDirectory(prefix="jobwarden-bench-store-") as tmp:
        store = ResultStore.from_url((Path(tmp) / "results").as_uri(), environ={})
        results.append(_scenario("file", store, total, blocks, args.limit_mb))
        if not args.skip_s3:
            server = S3Server.start(Path(tmp))
            try:
                server.create_bucket("jobwarden-bench")
                s3 = ResultStore.from_url("s3://jobwarden-bench/results", environ=server.environ())
                results.append(_scenario("s3", s3, total, blocks, args.limit_mb))
            finally:
                server.stop()
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
