"""Memory check: a worker's peak RSS while the provider edge reads 400 MB answers.

Issue 7 saw one 400 MB status body take a worker to 1.3 GB RSS (read whole, then cut).
The edge now cuts bodies while reading, so the peak may grow by the body limit and a
small constant, never by the body. A sandbox in a subprocess (so its memory is not
counted) serves bodies of --body-mb generated while written; this process reads them
through tasks.provider.edge.ProviderClient as status answers (bounded by the answer
limit) and as result downloads (bounded by the contract's result.max_bytes), and
compares its peak RSS (VmHWM, reset before each scenario) with the limit. Exits 1 when
a delta exceeds limit + --slack-mb. Linux only (/proc/self).

    .venv/bin/python scripts/bench_memory.py --body-mb 400 --answers 3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MIB = 1024 * 1024


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> bool:
    """Make VmHWM the current RSS (Linux >= 4.0); False where that is not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the sandbox exited before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"the sandbox did not listen on {port} within {timeout}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body-mb", type=int, default=400, help="size of each answer")
    parser.add_argument("--answers", type=int, default=3, help="answers read per scenario")
    parser.add_argument("--answer-limit-mb", type=float, default=1.0, help="status bound")
    parser.add_argument("--result-limit-mb", type=float, default=50.0, help="result.max_bytes")
    parser.add_argument("--slack-mb", type=float, default=8.0, help="allowed beyond a limit")
    args = parser.parse_args()

    token = secrets.token_hex(12)
    os.environ["JOBWARDEN_SANDBOX_TOKEN"] = token
    port = _free_port()
    serve = (
        "import sys; from jobwarden.demo.sandbox.server import serve; "
        "serve(sys.argv[1], int(sys.argv[2]), sys.argv[3])"
    )
    sandbox = subprocess.Popen(
        [sys.executable, "-c", serve, "127.0.0.1", str(port), token],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, sandbox)
        return _run(args, f"http://127.0.0.1:{port}")
    finally:
        sandbox.terminate()
        sandbox.wait(timeout=10)


def _run(args: argparse.Namespace, base_url: str) -> int:
    from jobwarden.models.actions import ProviderRequest, RequestPurpose
    from jobwarden.models.contracts.loader import load_contract
    from jobwarden.models.provider.signals import RawResponse
    from jobwarden.tasks.provider.edge import ProviderClient

    shipped = load_contract(REPO / "config" / "providers" / "sandbox.toml")
    assert shipped.result is not None
    result_limit = int(args.result_limit_mb * MIB)
    contract = dataclasses.replace(
        shipped,
        base_url=base_url,
        base_url_env=None,
        result=dataclasses.replace(shipped.result, max_bytes=result_limit),
    )
    answer_limit = int(args.answer_limit_mb * MIB)
    client = ProviderClient(answer_limit=answer_limit)
    body = args.body_mb * MIB

    def send(
        purpose: RequestPurpose, method: str, path: str, json_body: object = None
    ) -> RawResponse:
        request = ProviderRequest(
            purpose=purpose,
            method=method,
            url=base_url + path,
            headers={"Idempotency-Key": secrets.token_hex(8)} if json_body else {},
            json_body=json_body,
        )
        return client.send(contract, request, trace_id=secrets.token_hex(16))

    def job(behaviour: dict[str, object]) -> str:
        raw = send(RequestPurpose.create, "POST", "/v1/jobs", {"behaviour": behaviour})
        created = raw.observation.body
        assert isinstance(created, dict), created
        return str(created["id"])

    # Warm up every code path first, so the baseline holds imports, pools and buffers.
    warm = job({"polls_to_finish": 1})
    send(RequestPurpose.status, "GET", f"/v1/jobs/{warm}")
    send(RequestPurpose.result, "GET", f"/v1/jobs/{warm}/result")

    scenarios = []
    status_jobs = [job({"hostile_status": "huge", "huge_bytes": body}) for _ in range(args.answers)]
    result_jobs = [
        job({"hostile_result": "huge", "huge_bytes": body, "polls_to_finish": 1})
        for _ in range(args.answers)
    ]
    for job_id in result_jobs:
        send(RequestPurpose.status, "GET", f"/v1/jobs/{job_id}")  # finishes the job
    scenarios.append(("status answers", answer_limit, RequestPurpose.status, status_jobs, ""))
    scenarios.append(
        ("result downloads", result_limit, RequestPurpose.result, result_jobs, "/result")
    )

    peak_reset = True
    failed = False
    print(
        f"{'scenario':<18}{'answers':>8}{'body MB':>9}{'limit MB':>10}{'baseline MB':>13}"
        f"{'peak MB':>9}{'delta MB':>10}{'allowed MB':>12}  verdict"
    )
    for name, limit, purpose, jobs, suffix in scenarios:
        peak_reset = _reset_peak() and peak_reset
        baseline = _status_kb("VmRSS") / 1024
        cut = 0
        for job_id in jobs:
            raw = send(purpose, "GET", f"/v1/jobs/{job_id}{suffix}")
            obs = raw.observation
            if limit < body and obs.body_problem != "too_large":
                raise AssertionError(f"{name}: not cut ({obs.body_problem}, {len(raw.content)})")
            cut = max(cut, len(raw.content))
            del raw, obs
        peak = _status_kb("VmHWM") / 1024
        delta = peak - baseline
        allowed = limit / MIB + args.slack_mb
        ok = delta <= allowed
        failed = failed or not ok
        print(
            f"{name:<18}{len(jobs):>8}{args.body_mb:>9}{limit / MIB:>10.1f}{baseline:>13.1f}"
            f"{peak:>9.1f}{delta:>10.1f}{allowed:>12.1f}  {'ok' if ok else 'TOO MUCH'}"
            f"  (kept {cut} bytes of each)"
        )
    client.close()
    if not peak_reset:
        print("note: /proc/self/clear_refs refused; peaks include start-up")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
