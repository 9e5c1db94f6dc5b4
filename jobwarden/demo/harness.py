"""Start and stop real worker and beat processes: used by the demo and the tests.

Workers are ordinary `celery worker` subprocesses with the caller's
environment, so what the tests exercise is what operators run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


def wait_for(
    predicate: Callable[[], T], *, timeout: float, interval: float = 0.05, what: str = "condition"
) -> T:
    """Poll a condition until it is truthy; raise TimeoutError naming it otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def wait_for_progress(
    measure: Callable[[], tuple[int, str]],
    *,
    target: int,
    stall: float,
    timeout: float,
    what: str = "progress",
) -> None:
    """Poll ``measure`` (a count and a description of where things stand) until the count
    reaches ``target``. A loaded machine may be slow but not stuck: this fails when the
    count has not risen for ``stall`` seconds, or at the latest after ``timeout``, and the
    error says where things stood, not merely that time ran out. It looks five times per
    ``stall`` (at most every two seconds): often enough to see a rise, cheap on the database."""
    interval = min(2.0, stall / 5)
    started = time.monotonic()
    best, seen = measure()
    moved = started
    while best < target:
        now = time.monotonic()
        if now - moved > stall or now - started > timeout:
            raise TimeoutError(
                f"{what}: {best} of {target} after {now - started:.0f}s, "
                f"none more in the last {now - moved:.0f}s ({seen})"
            )
        time.sleep(interval)
        count, seen = measure()
        if count > best:
            best, moved = count, time.monotonic()


class Stack:
    """Celery workers and a beat process sharing one environment."""

    def __init__(self, env: Mapping[str, str], *, log_dir: Path | None = None) -> None:
        self.env = {**os.environ, **env}
        self.env.setdefault("PYTHONPATH", str(REPO))
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="jobwarden-stack-"))
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.beats: list[subprocess.Popen[bytes]] = []
        self._ready_seen: dict[str, int] = {}

    def _spawn(
        self, name: str, args: list[str], extra_env: Mapping[str, str]
    ) -> subprocess.Popen[bytes]:
        with (self.log_dir / f"{name}.log").open("ab") as log:
            # The child keeps its own copy of the descriptor; ours can close at once.
            # --quiet: no banner printed past the logging, so every line is a log record.
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "--quiet",
                    "-A",
                    "jobwarden.config.celery_app",
                    *args,
                ],
                env={**self.env, **extra_env},
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(REPO),
                start_new_session=True,
            )

    def start_worker(
        self,
        name: str = "w1",
        *,
        concurrency: int = 2,
        extra_env: Mapping[str, str] | None = None,
        notifications: bool = True,
        loglevel: str = "INFO",
    ) -> subprocess.Popen[bytes]:
        """A worker on the stack's queue and, unless ``notifications`` is False, on its
        notifications queue too (``Settings.notifications_queue``). One process for both
        keeps a test or demo stack small; docker-compose.yml runs them apart, so that in
        production a slow receiver never holds a seat of the workers that poll."""
        queue = self.env.get("JOBWARDEN_QUEUE", "jobwarden")
        if notifications:
            queue = f"{queue},{queue}.notifications"
        self._ready_seen[name] = self._ready_lines(name)
        proc = self._spawn(
            name,
            [
                "worker",
                "--pool=prefork",
                f"--concurrency={concurrency}",
                "-Q",
                queue,
                "-n",
                f"{name}@%h",
                "--without-gossip",
                "--without-mingle",
                f"--loglevel={loglevel}",
            ],
            {"JOBWARDEN_WORKER_NAME": name, **(extra_env or {})},
        )
        self.workers[name] = proc
        return proc

    def wait_ready(self, name: str, *, timeout: float = 60.0) -> None:
        """Block until the named worker logs that it consumes (Celery's "ready." line)."""
        before = self._ready_seen.get(name, 0)

        def ready() -> bool:
            proc = self.workers.get(name)
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"worker {name} exited: {self.logs()}")
            return self._ready_lines(name) > before

        wait_for(ready, timeout=timeout, interval=0.1, what=f"worker {name} to be ready")

    def _ready_lines(self, name: str) -> int:
        log = self.log_dir / f"{name}.log"
        return log.read_text(errors="replace").count(" ready.") if log.exists() else 0

    def start_beat(self, name: str = "beat") -> subprocess.Popen[bytes]:
        schedule = self.log_dir / f"{name}-schedule"
        proc = self._spawn(name, ["beat", f"--schedule={schedule}", "--loglevel=INFO"], {})
        self.beats.append(proc)
        return proc

    def kill_worker(self, name: str) -> None:
        proc = self.workers.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def kill_worker_of(self, pid: int) -> str:
        """SIGKILL the whole worker (main process and pool) that `pid` belongs to."""
        group = os.getpgid(pid)
        for name, proc in self.workers.items():
            if proc.pid == group:
                self.kill_worker(name)
                return name
        raise LookupError(f"process {pid} belongs to no worker of this stack")

    def stop(self) -> None:
        procs = list(self.workers.values()) + self.beats
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self.workers.clear()
        self.beats.clear()

    def logs(self) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )
