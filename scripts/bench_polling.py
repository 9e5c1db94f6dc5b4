"""Polling pressure against detection delay, for a mix of job durations.

Each simulated job (durations log-uniform from 5 s to 2 h, seeded) is polled on a
virtual clock through the pure core the worker runs, nothing re-implemented: the
first poll waits what ``first_poll`` says (as after a create), every status
request goes through ``models.steps.before_poll`` and every answer, a status body
built at the contract's own pointers, through ``models.steps.after_poll``; the
next poll is at the returned ``Wait.until``. No servers, no sleeping.

A job waits in the queue (up to 10 % of its duration, no progress), then runs; its
progress is not linear: ``(run time so far / run time) ** a`` with ``a`` between
0.8 and 1.25 per job, reported in whole percent. Detection delay is the time from
the job's finish to the answer that says so, as a share of the job's duration
(from acceptance); the "floored" p95 counts a delay of up to 2 s as on time.
Fixed 10 s polling asks at 10 s, 20 s, ... until it sees the finish.

    .venv/bin/python scripts/bench_polling.py --jobs 2000 --seed 1 --contract azure_lro
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from jobwarden.models.actions import Send, Wait  # noqa: E402 - after the path above
from jobwarden.models.contract import ProviderContract  # noqa: E402
from jobwarden.models.contract_loader import load_contract  # noqa: E402
from jobwarden.models.decisions import first_poll, poll_view  # noqa: E402
from jobwarden.models.history import EventKind  # noqa: E402
from jobwarden.models.operation import Operation  # noqa: E402
from jobwarden.models.requests import StepContext  # noqa: E402
from jobwarden.models.signals import HttpObservation, RawResponse  # noqa: E402
from jobwarden.models.states import OperationState  # noqa: E402
from jobwarden.models.steps import after_poll, before_poll  # noqa: E402

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
FIXED_INTERVAL = 10.0
FLOOR_SECONDS = 2.0
TARGETS = {"requests": 1 / 3, "p95": 0.20, "p95_progress": 0.10}


@dataclass(frozen=True, slots=True)
class Job:
    duration: float  # acceptance to finish, seconds
    queued: float  # acceptance to start
    exponent: float  # progress curve: (ran / run time) ** exponent

    def progress(self, t: float) -> int:
        if t <= self.queued:
            return 0
        share = (t - self.queued) / (self.duration - self.queued)
        return min(99, math.floor(100 * share**self.exponent))


def jobs(count: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    low, high = math.log(5.0), math.log(7200.0)
    out = []
    for _ in range(count):
        duration = math.exp(rng.uniform(low, high))
        exponent = math.exp(rng.uniform(math.log(0.8), math.log(1.25)))
        out.append(Job(duration=duration, queued=duration * rng.uniform(0, 0.1), exponent=exponent))
    return out


def _put(body: dict[str, Any], pointer: str | None, value: object) -> None:
    """Set ``value`` at an RFC 6901 pointer, making the objects on the way."""
    if pointer is None:
        return
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    node = body
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def status_body(
    contract: ProviderContract, job: Job, t: float, *, progress: bool
) -> dict[str, Any]:
    spec, states = contract.status, contract.states
    body: dict[str, Any] = {}
    if t >= job.duration:
        _put(body, spec.state_pointer, sorted(states.succeeded)[0])
        _put(body, spec.result_ref_pointer, contract.base_url + "/results/1")
        _put(body, spec.progress_pointer, 100)
        return body
    pending = sorted(states.pending)
    _put(body, spec.state_pointer, pending[-1] if t > job.queued else pending[0])
    if progress:
        _put(body, spec.progress_pointer, job.progress(t))
        if t > job.queued:
            started = EPOCH + timedelta(seconds=job.queued)
            _put(body, spec.started_at_pointer, started.isoformat().replace("+00:00", "Z"))
    return body


def operation(contract: ProviderContract, job: Job) -> Operation:
    far = EPOCH + timedelta(seconds=3 * job.duration + 3600)  # the deadline never decides
    values: dict[str, Any] = {
        "operation_id": uuid.UUID(int=1),
        "tenant": "bench",
        "provider": contract.name,
        "idempotency_key": "k",
        "source_event_id": None,
        "provider_token": "jw-0",
        "request_fingerprint": "f" * 64,
        "method": "POST",
        "route": f"/providers/{contract.name}/operations",
        "command": {},
        "remote_job_id": "job-1",
        "status_url": contract.base_url + "/operations/job-1",
        "state": OperationState.accepted,
        "version": 1,
        "trace_id": "a" * 32,
        "requested_by": "bench",
        "authorized_by": "bench",
        "approval_expires_at": None,
        "created_at": EPOCH,
        "accepted_at": EPOCH,
        "create_deadline": far,
        "result_deadline": far,
        "cancel_deadline": None,
        "cancel_window_seconds": None,
        "next_poll_at": None,
        "dispatched_at": None,
        "create_attempts": 1,
        "status_requests_used": 0,
        "max_status_requests": 10**9,  # the budget never decides either: we count
        "transport_failures_used": 0,
        "max_transport_failures": 10,
        "consecutive_rate_limited": 0,
        "poll_attempt": 0,
        "extensions_used": 0,
        "step_failures": 0,
        "poll_not_before": None,
        "result_fetch_attempts": 0,
        "collect_deadline": None,
        "first_sent_at": None,
        "last_remote_state": None,
        "last_http_status": None,
        "progress": None,
        "escalation_reason": None,
        "escalation_detail": None,
        "cancel_requested_by": None,
        "cancel_reason": None,
        "result_reference": None,
        "validation_summary": None,
        "event_count": 3,
        "last_event_hash": "0" * 64,
        "updated_at": EPOCH,
        "last_event_kind": EventKind.create_accepted,
    }
    return Operation(**values)


def _answer(body: dict[str, Any]) -> RawResponse:
    observation = HttpObservation(
        status_code=200, headers={}, body=body, body_problem=None, transport_failure=None
    )
    return RawResponse(
        observation=observation,
        content=b"",
        content_type="application/json",
        provider_request_id=None,
    )


def polls(ctx: StepContext, job: Job, rng: random.Random, *, progress: bool) -> Iterator[float]:
    """The virtual times (seconds after acceptance) of each status request, to the finish."""
    op = operation(ctx.contract, job)
    wait = first_poll(poll_view(op, accepted_at=EPOCH), ctx.contract.poll, now=EPOCH)
    while True:
        now = wait.until
        op = op.with_changes({"next_poll_at": now})
        before = before_poll(op, ctx, now)
        if not isinstance(before.action, Send):
            raise SystemExit(f"before_poll did not send: {before.action}")
        send = before.action
        changes: dict[str, Any] = dict(send.counters) | dict(send.changes)
        if send.move_to is not None:
            changes["state"] = send.move_to
        op = op.with_changes(changes)
        t = (now - EPOCH).total_seconds()
        yield t
        after = after_poll(
            op,
            ctx,
            send.request,
            _answer(status_body(ctx.contract, job, t, progress=progress)),
            now,
            rng.random(),
        )
        if not isinstance(after.action, Wait):
            return
        wait = after.action
        op = op.with_changes(dict(after.changes) | {"next_poll_at": wait.until})


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    counts: list[int]  # status requests per job
    fractions: list[float]  # detection delay / duration, per job
    floored: list[float]  # the same, with a delay up to FLOOR_SECONDS counted as 0

    @property
    def requests(self) -> int:
        return sum(self.counts)


BANDS = ((5.0, 60.0, "5 s-1 min"), (60.0, 600.0, "1-10 min"), (600.0, 7200.0, "10 min-2 h"))


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 1000) - 1]


def simulate(name: str, ctx: StepContext, mix: list[Job], seed: int, *, progress: bool) -> Row:
    rng = random.Random(seed)
    counts, fractions, floored = [], [], []
    for job in mix:
        times = list(polls(ctx, job, rng, progress=progress))
        counts.append(len(times))
        delay = times[-1] - job.duration
        fractions.append(delay / job.duration)
        floored.append(0.0 if delay <= FLOOR_SECONDS else delay / job.duration)
    return Row(name=name, counts=counts, fractions=fractions, floored=floored)


def fixed(mix: list[Job]) -> Row:
    counts, fractions, floored = [], [], []
    for job in mix:
        n = math.ceil(job.duration / FIXED_INTERVAL)
        counts.append(n)
        delay = n * FIXED_INTERVAL - job.duration
        fractions.append(delay / job.duration)
        floored.append(0.0 if delay <= FLOOR_SECONDS else delay / job.duration)
    return Row(name="fixed 10 s polling", counts=counts, fractions=fractions, floored=floored)


def by_band(row: Row, baseline: Row, mix: list[Job]) -> str:
    parts = []
    for low, high, label in BANDS:
        at = [i for i, job in enumerate(mix) if low <= job.duration < high]
        if len(at) < 2:
            continue
        ratio = sum(row.counts[i] for i in at) / sum(baseline.counts[i] for i in at)
        p95 = _pct([row.floored[i] for i in at], 0.95)
        parts.append(f"{label}: {ratio:.2f} x, p95 {p95:.0%}")
    return "; ".join(parts)


def with_progress(contract: ProviderContract, *, started_at: bool) -> ProviderContract:
    """The contract as is when it reads progress; else with /progress and /started_at."""
    status = contract.status
    if status.progress_pointer is None:
        status = replace(status, progress_pointer="/progress")
    if started_at and status.started_at_pointer is None:
        status = replace(status, started_at_pointer="/started_at")
    if not started_at:
        status = replace(status, started_at_pointer=None)
    return replace(contract, status=status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--contract", default="azure_lro", help="a file in config/providers/")
    parser.add_argument("--growth", type=float, help="override the contract's growth_factor")
    parser.add_argument("--jitter-floor", type=float, help="override the contract's jitter_floor")
    parser.add_argument("--max-seconds", type=float, help="override the contract's max_seconds")
    parser.add_argument("--bands", action="store_true", help="also print each duration band")
    args = parser.parse_args()

    contract = load_contract(REPO / "config" / "providers" / f"{args.contract}.toml")
    if args.growth is not None:
        contract = replace(contract, poll=replace(contract.poll, growth_factor=args.growth))
    if args.jitter_floor is not None:
        contract = replace(contract, poll=replace(contract.poll, jitter_floor=args.jitter_floor))
    if args.max_seconds is not None:
        contract = replace(contract, poll=replace(contract.poll, max_seconds=args.max_seconds))
    policy = contract.poll
    old = replace(contract, poll=replace(policy, growth_factor=2.0))
    mix = jobs(args.jobs, args.seed)

    def ctx(c: ProviderContract) -> StepContext:
        return StepContext(contract=c, base_url=c.base_url)

    baseline = fixed(mix)
    g = policy.growth_factor
    rows = [
        baseline,
        simulate("backoff, factor 2 (same rules)", ctx(old), mix, args.seed, progress=False),
        simulate(f"backoff, factor {g:g}", ctx(contract), mix, args.seed, progress=False),
        simulate(
            "progress, factor 2 (same rules)",
            ctx(with_progress(old, started_at=True)),
            mix,
            args.seed,
            progress=True,
        ),
        simulate(
            f"progress + start time, factor {g:g}",
            ctx(with_progress(contract, started_at=True)),
            mix,
            args.seed,
            progress=True,
        ),
        simulate(
            f"progress, no start time, factor {g:g}",
            ctx(with_progress(contract, started_at=False)),
            mix,
            args.seed,
            progress=True,
        ),
    ]
    print(
        f"{args.jobs} jobs, 5 s .. 2 h log-uniform, seed {args.seed}; contract {contract.name}: "
        f"initial {policy.initial_delay_seconds:g} s, base {policy.base_seconds:g} s, "
        f"max {policy.max_seconds:g} s, jitter floor {policy.jitter_floor:g}, growth {g:g}"
    )
    print(
        f"{'policy':<38} {'requests':>9} {'vs fixed':>8} {'p50':>7} {'p95':>7} "
        f"{'p95 (2 s floor)':>15} {'max':>7}"
    )
    for row in rows:
        print(
            f"{row.name:<38} {row.requests:>9} {row.requests / baseline.requests:>8.3f} "
            f"{_pct(row.fractions, 0.5):>7.1%} {_pct(row.fractions, 0.95):>7.1%} "
            f"{_pct(row.floored, 0.95):>15.1%} {max(row.fractions):>7.1%}"
        )
        if args.bands:
            print(f"    {by_band(row, baseline, mix)}")
    print(
        f"targets: requests <= {TARGETS['requests']:.3f} x fixed; p95 (2 s floor) <= "
        f"{TARGETS['p95']:.0%}, with progress <= {TARGETS['p95_progress']:.0%}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
