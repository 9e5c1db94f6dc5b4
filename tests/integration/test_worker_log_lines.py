"""A worker at --loglevel=INFO writes no line of Celery's own for each task it receives or
finishes well (issue 37): a step's `step_done` already says it once, and each of Celery's
two lines cost ~45 µs through the JSON formatter on every poll. A task's failure still
logs (a stop's "raised expected" line too: tests/acceptance/test_structured_logs.py), and
--loglevel=DEBUG shows the per-task lines again.

A real worker (tests run against real servers), sent real tasks on a queue of its own.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from celery.result import AsyncResult

from jobwarden.config.celery_app import PER_TASK_LOGGERS, PER_TASK_MESSAGES, app
from jobwarden.demo.harness import Stack, wait_for


def _stack(database_url: str, tmp_path: Path, level: str) -> Stack:
    # A queue of this test's own (earlier tests leave wake-ups on the session's), under the
    # session's key prefix, which this process's Celery app publishes under.
    queue = f"{os.environ['JOBWARDEN_QUEUE']}-lines-{secrets.token_hex(3)}"
    stack = Stack(
        {"JOBWARDEN_DATABASE_URL": database_url, "JOBWARDEN_QUEUE": queue},
        log_dir=tmp_path / level,
    )
    stack.log_dir.mkdir()
    stack.env.pop("PYTHONDONTWRITEBYTECODE", None)
    return stack


def _run_tasks(stack: Stack, name: str, level: str) -> str:
    """Start a worker at ``level``, have it run a tally fold (harmless to the other tests'
    rows, unlike a sweep) and a failing task, and return its log. Both results are
    awaited (bounded), never slept on."""
    queue = stack.env["JOBWARDEN_QUEUE"]
    stack.start_worker(name, concurrency=1, notifications=False, loglevel=level)
    try:
        stack.wait_ready(name)
        folded = app.send_task("jobwarden.fold_tallies", queue=queue, ignore_result=False)
        assert isinstance(AsyncResult(folded.id, app=app).get(timeout=60), int)
        # A step for an operation id that is no UUID: the task raises.
        failed = app.send_task(
            "jobwarden.poll", args=["not-a-uuid"], queue=queue, ignore_result=False
        )
        with pytest.raises(ValueError):
            AsyncResult(failed.id, app=app).get(timeout=60)
        log = stack.log_dir / f"{name}.log"
        # The failure's line may be written just after its result is stored.
        wait_for(
            lambda: f"jobwarden.poll[{failed.id}]" in log.read_text(errors="replace"),
            timeout=30,
            what="the failure's line",
        )
        return log.read_text(errors="replace")
    finally:
        stack.stop()


@pytest.mark.timeout(240)
def test_a_worker_at_info_writes_no_per_task_line_of_celerys_but_its_failures(
    database_url: str, tmp_path: Path
) -> None:
    assert PER_TASK_LOGGERS == ("celery.worker.strategy", "celery.app.trace")
    assert len(PER_TASK_MESSAGES) == 2
    log = _run_tasks(_stack(database_url, tmp_path, "INFO"), "lines-info", "INFO")
    assert " ready." in log
    assert "Task jobwarden.fold_tallies[" not in log, log[-3000:]
    assert "succeeded in" not in log, log[-3000:]
    # The failure is still there, at ERROR, with its task's name.
    assert "jobwarden.poll[" in log and "ValueError" in log, log[-3000:]


@pytest.mark.timeout(240)
def test_a_worker_at_debug_writes_them_again(database_url: str, tmp_path: Path) -> None:
    log = _run_tasks(_stack(database_url, tmp_path, "DEBUG"), "lines-debug", "DEBUG")
    assert "Task jobwarden.fold_tallies[" in log and "succeeded in" in log, log[-3000:]
