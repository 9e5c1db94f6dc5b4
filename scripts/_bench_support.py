"""Helpers for scripts/bench_poll.py: a bench copy of the sandbox contract, CPU time read
from /proc, and Celery worker processes started with the round-trip probe."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
TICKS = os.sysconf("SC_CLK_TCK")


def bench_contract(directory: Path, *, polls: int | None = None, parked: bool = False) -> None:
    """The shipped sandbox contract with 1 ms waits and a budget of `polls` requests;
    `parked`: the first poll waits an hour, so only the benchmark wakes it."""
    text = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    for key in ("initial_delay_seconds", "base_seconds", "max_seconds", "hint_floor_seconds"):
        text = re.sub(rf"(?m)^{key} = .*$", f"{key} = 0.001", text)
    budget = polls if polls is not None else 1000000
    text = re.sub(r"(?m)^max_status_requests = .*$", f"max_status_requests = {budget}", text)
    if parked:
        text = re.sub(r"(?m)^initial_delay_seconds = .*$", "initial_delay_seconds = 3600", text)
        text = re.sub(r"(?m)^result_deadline_seconds = .*$", "result_deadline_seconds = 7200", text)
    (directory / "sandbox.toml").write_text(text)


@contextlib.contextmanager
def sandbox_client(url: str, token: str) -> Iterator[Any]:
    import httpx

    with httpx.Client(
        base_url=url, timeout=5, headers={"Authorization": f"Bearer {token}"}
    ) as client:
        yield client


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (0 when it is gone or unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def group_cpu(pgid: int) -> dict[int, float]:
    """CPU seconds of every live process in a process group, by pid."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(ProcessLookupError, FileNotFoundError, PermissionError):
                if os.getpgid(int(entry.name)) == pgid:
                    out[int(entry.name)] = cpu_seconds(int(entry.name))
    return out


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU spent between two snapshots; a process born in between counts from zero."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.02
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclass
class Worker:
    """A `celery worker` process group started through scripts/_bench_probe.py."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker {self.name} exited:\n{self.log.read_text()[-3000:]}")
        return " ready." in self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


def start_worker(
    args: argparse.Namespace, logs: Path, name: str, app: str, env: dict[str, str]
) -> Worker:
    """Start `celery -A app worker` on env's queue, in a process group of its own."""
    log = logs / f"{name}.log"
    command = [
        sys.executable,
        str(SCRIPTS / "_bench_probe.py"),
        "-A",
        app,
        "worker",
        "--pool=prefork",
        f"--concurrency={args.concurrency}",
        "-Q",
        env["BENCH_QUEUE"],
        "-n",
        f"{name}@%h",
        "--without-gossip",
        "--without-mingle",
        f"--loglevel={args.loglevel}",
    ]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            command,
            env={**os.environ, **env, "PYTHONPATH": f"{SCRIPTS}:{REPO}"},
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
            start_new_session=True,
        )
    return Worker(name, proc, log)
