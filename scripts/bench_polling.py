"""Status requests against detection delay: job duration x provider behaviour x policy.

Each simulated job is polled on a virtual clock through the pure core the worker runs,
nothing re-implemented: the first poll waits what ``first_poll`` says (as after a
create), every status request goes through ``models.steps.before_poll`` and every
answer, a status body built at the contract's own pointers, through
``models.steps.after_poll``; the next poll is at the returned ``Wait.until``. No servers,
no sleeping. Two progress-blind baselines are computed directly: fixed 10 s polling,
and the source article's schedule (``raw = min(120 s, 5 s x 2**attempt)``, each wait a
uniform random 50-100 % of raw).

A job of nominal duration D lasts D x U(0.9, 1.1) from acceptance, so fixed polling
too meets every phase. What the provider reports while it runs (``BEHAVIOURS``):

- ``none``: only the state;
- ``steady``: progress ``100 t / D`` (a float, as Azure's percentComplete) and its start;
- ``stall90``: the same pace to 90 % at 0.6 D, then 90 % until the end;
- ``front``: 60 % in the first 20 % of the time, the rest at a slower pace;
- ``back``: progress ``100 (t / D) ** 1.5``, slow first and ever faster (the average
  pace so far always promises a later finish than the job's);
- ``eta_slips``: no progress, an estimated finish that starts at 0.6 D and slips
  towards the true end (``0.6 D + 0.4 t``), always early.

Lateness is the time from the finish to the answer that says so, as a share of the
duration. Columns: mean and p95 status requests per job, mean and p95 lateness.

    .venv/bin/python scripts/bench_polling.py --jobs 200 --seed 1
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from jobwarden.models.actions import Send, Wait  # noqa: E402 - after the path above
from jobwarden.models.contracts.contract import ProviderContract, StatusSpec  # noqa: E402
from jobwarden.models.contracts.loader import load_contract  # noqa: E402
from jobwarden.models.conventions.strategies import AZURE, Monitor  # noqa: E402
from jobwarden.models.history.chain import EventKind  # noqa: E402
from jobwarden.models.operation import Operation  # noqa: E402
from jobwarden.models.polling.decisions import first_poll, poll_view  # noqa: E402
from jobwarden.models.provider.requests import StepContext  # noqa: E402
from jobwarden.models.provider.signals import HttpObservation, RawResponse  # noqa: E402
from jobwarden.models.states import OperationState  # noqa: E402
from jobwarden.models.steps import after_poll, before_poll  # noqa: E402

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
FIXED_INTERVAL = 10.0
DURATIONS = (5.0, 60.0, 600.0, 3600.0, 7200.0)
SHIPPED = ("azure_lro", "openai_batch")  # azure_arm and google_aip151 poll as azure_lro
# StatusSpec fields this bench fills when a contract does not read them (older cores
# lack the ETA field: the bench still runs there, and the ETA is then unread).
_SPEC_FIELDS = {f.name for f in fields(StatusSpec)}


@dataclass(frozen=True, slots=True)
class Report:
    """What the provider says at one moment while the job runs (None: not said)."""

    progress: float | None = None
    eta: float | None = None  # seconds after acceptance, on the provider's clock


def _steady(d: float, t: float) -> Report:
    return Report(progress=100.0 * t / d)


def _stall90(d: float, t: float) -> Report:
    return Report(progress=min(90.0, 150.0 * t / d))


def _front(d: float, t: float) -> Report:
    share = t / d
    return Report(progress=300.0 * share if share < 0.2 else 60.0 + 50.0 * (share - 0.2))


def _back_loaded(d: float, t: float) -> Report:
    return Report(progress=100.0 * (t / d) ** 1.5)


def _eta_slips(d: float, t: float) -> Report:
    return Report(eta=0.6 * d + 0.4 * t)


BEHAVIOURS: dict[str, Callable[[float, float], Report]] = {
    "none": lambda d, t: Report(),
    "steady": _steady,
    "stall90": _stall90,
    "front": _front,
    "back": _back_loaded,
    "eta_slips": _eta_slips,
}


def _put(body: dict[str, Any], pointer: str | None, value: object) -> None:
    """Set ``value`` at an RFC 6901 pointer, making the objects on the way."""
    if pointer is None:
        return
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    node = body
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _iso(seconds: float) -> str:
    return (EPOCH + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def reads(contract: ProviderContract) -> ProviderContract:
    """The contract with a progress, start and ETA pointer wherever it reads none."""
    status = contract.status
    extra: dict[str, str] = {}
    counts = getattr(status, "items_total_pointer", None) is not None
    if status.progress_pointer is None and not counts:
        extra["progress_pointer"] = "/progress"
    if status.started_at_pointer is None:
        extra["started_at_pointer"] = "/started_at"
    if "eta_pointer" in _SPEC_FIELDS and getattr(status, "eta_pointer", None) is None:
        extra["eta_pointer"] = "/estimated_completion_time"
    return replace(contract, status=replace(status, **extra))


def status_body(
    contract: ProviderContract, duration: float, t: float, report: Report
) -> dict[str, Any]:
    spec, states = contract.status, contract.states
    state_pointer = spec.state_pointer or "/status"  # an Azure status monitor's
    body: dict[str, Any] = {}
    if t >= duration:
        _put(body, state_pointer, sorted(states.succeeded)[0])
        _put(body, spec.result_ref_pointer, contract.base_url + "/results/1")
        return body
    running = sorted(states.pending)
    _put(body, state_pointer, "in_progress" if "in_progress" in running else running[-1])
    if report.progress is not None:
        if spec.progress_pointer is not None:
            _put(body, spec.progress_pointer, round(report.progress, 3))
        elif getattr(spec, "items_total_pointer", None) is not None:
            _put(body, spec.items_total_pointer, 100_000)  # type: ignore[attr-defined]
            done = math.floor(report.progress * 1000)
            _put(body, spec.items_completed_pointer, done)  # type: ignore[attr-defined]
        _put(body, spec.started_at_pointer, _iso(0.0))
    if report.eta is not None:
        _put(body, getattr(spec, "eta_pointer", None), _iso(report.eta))
    return body


def operation(contract: ProviderContract, duration: float) -> Operation:
    far = EPOCH + timedelta(seconds=3 * duration + 3600)  # the deadline never decides
    azure = contract.convention in AZURE
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
        "polling_mode": Monitor.status_monitor.value if azure else None,
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


def polls(ctx: StepContext, duration: float, behaviour: str, rng: random.Random) -> Iterator[float]:
    """The virtual times (seconds after acceptance) of each status request, to the finish."""
    op = operation(ctx.contract, duration)
    report = BEHAVIOURS[behaviour]
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
        body = status_body(ctx.contract, duration, t, report(duration, t))
        after = after_poll(op, ctx, send.request, _answer(body), now, rng.random())
        if not isinstance(after.action, Wait):
            if t < duration:
                raise SystemExit(f"stopped before the finish: {after.action}")
            return
        wait = after.action
        op = op.with_changes(dict(after.changes) | {"next_poll_at": wait.until})


def fixed_times(duration: float, rng: random.Random) -> Iterator[float]:
    del rng
    for n in range(1, math.ceil(duration / FIXED_INTERVAL) + 1):
        yield n * FIXED_INTERVAL


def article_times(duration: float, rng: random.Random) -> Iterator[float]:
    """The article's schedule: wait ``U(0.5, 1) x min(120, 5 x 2**attempt)`` each time."""
    t, attempt = 0.0, 0
    while t < duration:
        t += rng.uniform(0.5, 1.0) * min(120.0, 5.0 * 2**attempt)
        attempt += 1
        yield t


@dataclass(frozen=True, slots=True)
class Cell:
    counts: list[int]
    late: list[float]  # lateness / duration

    def line(self) -> str:
        return (
            f"{statistics.fmean(self.counts):>6.1f} {_pct(self.counts, 0.95):>5.0f} "
            f"{statistics.fmean(self.late):>6.1%} {_pct(self.late, 0.95):>6.1%}"
        )


def _pct(values: list[int] | list[float], q: float) -> float:
    return float(statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1])


def measure(
    times: Callable[[float, random.Random], Iterator[float]], nominal: float, jobs: int, seed: int
) -> Cell:
    rng = random.Random(f"{seed}/{nominal}")
    counts, late = [], []
    for _ in range(jobs):
        duration = nominal * rng.uniform(0.9, 1.1)
        seen = list(times(duration, rng))
        counts.append(len(seen))
        late.append((seen[-1] - duration) / duration)
    return Cell(counts=counts, late=late)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs per cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--contracts", default=",".join(SHIPPED), help="files in config/providers/")
    parser.add_argument("--growth", type=float, help="override the contracts' growth_factor")
    parser.add_argument("--behaviours", default=",".join(BEHAVIOURS), help="rows to run")
    args = parser.parse_args()

    policies: dict[str, tuple[bool, Callable[[float, str, random.Random], Iterator[float]]]] = {}
    for name in args.contracts.split(","):
        contract = reads(load_contract(REPO / "config" / "providers" / f"{name}.toml"))
        if args.growth is not None:
            contract = replace(contract, poll=replace(contract.poll, growth_factor=args.growth))
        ctx = StepContext(contract=contract, base_url=contract.base_url)

        def run(d: float, b: str, r: random.Random, ctx: StepContext = ctx) -> Iterator[float]:
            return polls(ctx, d, b, r)

        policies[name] = (True, run)
    policies["fixed 10 s"] = (False, lambda d, b, r: fixed_times(d, r))
    policies["article"] = (False, lambda d, b, r: article_times(d, r))

    print(
        f"{args.jobs} jobs per cell, duration x U(0.9, 1.1), seed {args.seed}; per policy: "
        "mean and p95 status requests per job, mean and p95 lateness / duration"
    )
    head = f"{'duration':>8} {'behaviour':<10}"
    for name in policies:
        head += f" | {name:^26}"
    print(head)
    for nominal in DURATIONS:
        blind: dict[str, Cell] = {}
        for behaviour in args.behaviours.split(","):
            line = f"{nominal:>7g}s {behaviour:<10}"
            for name, (reads_body, times) in policies.items():
                if not reads_body and name in blind:
                    cell = blind[name]  # progress-blind: the same for every behaviour
                else:
                    cell = measure(
                        lambda d, r, t=times, b=behaviour: t(d, b, r), nominal, args.jobs, args.seed
                    )
                    if not reads_body:
                        blind[name] = cell
                line += f" | {cell.line()}"
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
