"""A demo stopped mid-way leaves nothing running (no worker, no beat, no sandbox) and no
temporary folder (issue 36: each run left a jobwarden-stack-* folder behind)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":  # a zombie has ended; only its exit status is left
            parents[int(entry.name)] = int(fields[1])  # field 4 of /proc/PID/stat: ppid
    return parents


def _descendants(root: int) -> set[int]:
    """Every live process below ``root`` (the harness starts its own process groups)."""
    parents, frontier = _parents(), {root}
    found: set[int] = set()
    while frontier:
        children = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= children
        frontier = children
    return found


def _alive(pids: set[int]) -> set[int]:
    return pids & set(_parents())


def test_a_demo_killed_after_it_started_its_worker_leaves_no_process_behind(
    database_url: str, tmp_path: Path
) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "jobwarden.cli.main", "demo"],
        cwd=REPO,
        env={**os.environ, "JOBWARDEN_DATABASE_URL": database_url, "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert demo.stdout is not None
    try:
        # The first submission is printed once the worker and beat are up and consuming.
        for line in demo.stdout:
            if line.startswith("submitted "):
                break
        else:
            raise AssertionError(f"the demo ended before submitting (exit {demo.wait()})")
        started = _descendants(demo.pid)
        assert len(started) >= 2  # the worker (and its pool) and beat run under it
        demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=60)
        assert _alive(started) == set()
        # The demo's own folder (its worker's and beat's logs): a worker's pool killed after
        # its grace period may leave files of its own in TMPDIR, which are not the demo's.
        left = [p.name for p in tmp_path.iterdir() if p.name.startswith("jobwarden-")]
        assert left == [], sorted(str(p) for p in tmp_path.rglob("*"))
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        demo.stdout.close()
