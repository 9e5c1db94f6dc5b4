"""`jobwarden demo` runs on a queue and key prefix of its own: a worker started from the
README on the configured queue, running all along, takes none of the demo's tasks
(issue 24: it took them, and 4 of 5 scenarios came out wrong). It sends on them from its
first message and leaves nothing behind: no message on any Redis list, no temporary folder
(issue 36: its creates and cancel went to a list under the configured prefix that no
worker reads, 6 messages a run, and each run left a jobwarden-stack-* folder).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis

from jobwarden.demo.harness import REPO, Stack
from jobwarden.demo.run import demo_routing


def test_the_demo_routes_to_a_queue_and_prefix_beside_the_configured_ones() -> None:
    routing = demo_routing("jobwarden", "jobwarden")
    assert routing == {
        "JOBWARDEN_QUEUE": "jobwarden-demo",
        "JOBWARDEN_KEY_PREFIX": "jobwarden-demo",
    }


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_readme_worker_on_the_configured_queue_takes_none_of_the_demos_tasks(
    database_url: str, tmp_path: Path
) -> None:
    # A configured queue of this test's own: earlier tests leave wake-ups on the session's.
    configured = f"{os.environ['JOBWARDEN_QUEUE']}-readme-{secrets.token_hex(3)}"
    env = {
        "JOBWARDEN_DATABASE_URL": database_url,
        "JOBWARDEN_QUEUE": configured,
        "JOBWARDEN_KEY_PREFIX": f"{os.environ['JOBWARDEN_KEY_PREFIX']}-{configured}",
    }
    readme = Stack(env, log_dir=tmp_path)
    # Bytecode is written, as on a user's machine (this one may set PYTHONDONTWRITEBYTECODE):
    # the venv is installed --no-compile, so else the worker, its pool's children and the
    # demo each compiled everything they import from source again.
    readme.env.pop("PYTHONDONTWRITEBYTECODE", None)
    demo_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # The demo's temporary folders land here, so what it leaves behind can be counted.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    try:
        readme.start_worker("readme-worker", concurrency=2)
        readme.wait_ready("readme-worker")
        demo = subprocess.run(
            [sys.executable, "-m", "jobwarden.cli.main", "demo"],
            cwd=REPO,
            env={**demo_env, **env, "TMPDIR": str(scratch)},
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
    finally:
        readme.stop()
    log = (tmp_path / "readme-worker.log").read_text(errors="replace")
    assert " ready." in log  # it was consuming the configured queue all along
    # Every step a worker runs logs `step_done` (Celery's own "received" line is off at
    # INFO, config/celery_app.py): a demo step run here would say so.
    assert "step_done" not in log, log[-3000:]
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-2000:]
    assert f"queue {configured}-demo (the demo's own)" in demo.stdout, demo.stdout
    # Every list under the configured prefix, which the demo's own ("<prefix>-demo") extends:
    # the queues of both, the notifications' and any a publisher made by mistake.
    redis = Redis.from_url(os.environ["JOBWARDEN_REDIS_URL"])
    try:
        left = {
            key.decode(): redis.llen(key)
            for key in redis.scan_iter(match=f"{env['JOBWARDEN_KEY_PREFIX']}*", count=1000)
            if redis.type(key) == b"list"
        }
    finally:
        redis.close()
    assert {key: n for key, n in left.items() if n} == {}
    assert list(scratch.iterdir()) == []
