"""The worker command of the operations guide (docs/how-to/operate.md, once the README's),
run as written, logs: INFO lines, structured, and it
consumes the queue JOBWARDEN_QUEUE names (here a queue of the test's own, so it never
takes another test's tasks)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import subprocess
import sys
from pathlib import Path

from jobwarden.demo.harness import wait_for

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "how-to" / "operate.md"


def _worker_command() -> list[str]:
    (command,) = re.findall(
        r"`(celery -A jobwarden\.config\.celery_app worker[^`]*)`", GUIDE.read_text()
    )
    program, *args = shlex.split(command)
    # The venv's celery, as an activated venv would find it.
    return [str(Path(sys.executable).parent / program), *args]


def test_the_readme_worker_command_logs_structured_info_lines(tmp_path: Path) -> None:
    queue = f"readme-{secrets.token_hex(4)}"
    log_file, banner = tmp_path / "worker.log", tmp_path / "banner.txt"

    def records() -> list[dict[str, object]]:
        lines = log_file.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    with log_file.open("wb") as stderr, banner.open("wb") as stdout:
        worker = subprocess.Popen(
            _worker_command(),
            cwd=REPO,
            env={**os.environ, "JOBWARDEN_QUEUE": queue, "JOBWARDEN_LOG_FORMAT": "json"},
            stdout=stdout,
            stderr=stderr,
        )
    try:

        def ready() -> bool:
            assert worker.poll() is None, log_file.read_text()[-2000:]
            return any(str(r["event"]).endswith("ready.") for r in records())

        # Celery's "ready." is an INFO line: at its default level (WARNING) it never comes.
        wait_for(ready, timeout=60, what="the worker's INFO line 'ready.'")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert all(r["level"] in ("info", "warning") for r in records())
    # It consumes the queue the variable names (Celery's banner lists it).
    assert f".> {queue} " in banner.read_text()
    # ...and not the notifications queue: a slow receiver never holds a poller's seat.
    assert f".> {queue}.notifications " not in banner.read_text()
