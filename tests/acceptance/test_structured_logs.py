"""The workers' logs as shipped: one JSON object per line, one event name each, the
operation and trace id bound — and no form of the provider's credential anywhere, even
when the provider echoes it back. And a step that stops automation is a task failure
as Flower shows it (Celery's "raised expected"), never retried.
"""

from __future__ import annotations

from typing import Any

import pytest

from jobwarden.demo.harness import Stack, wait_for
from tests.acceptance.conftest import (
    Pipeline,
    log_records,
    logged,
    unstructured_lines,
    worker_logs,
)

pytestmark = pytest.mark.usefixtures("stack")


def _printed_outside_logging(line: str) -> bool:
    """Celery's warning to a worker run as root, printed before its logging is set up
    (this test machine runs as root; the shipped image does not), and its shutdown
    notice on SIGTERM, printed after."""
    from celery.platforms import ROOT_DISCOURAGED

    template = [t.split("{", 1)[0] for t in ROOT_DISCOURAGED.splitlines() if t]
    return (
        not line.strip()
        or "SecurityWarning: " + template[0] in line
        or any(t and line.startswith(t) for t in template[1:])
        or line.strip() == "warnings.warn(SecurityWarning(ROOT_DISCOURAGED.format("
        or (line.startswith("worker: ") and line.endswith("shutdown (MainProcess)"))
    )


def _credential_forms() -> tuple[str, ...]:
    from jobwarden.tasks.provider.edge import secret_forms
    from jobwarden.tasks.runtime import current

    forms = secret_forms(current().contract("sandbox"))
    assert len(forms) >= 3  # plain, base64 and its variants: the scan looks for each
    return forms


def test_worker_logs_are_json_lines_with_bound_ids_and_never_hold_the_credential(
    pipeline: Pipeline, stack: Stack
) -> None:
    ops = {
        "succeeded": pipeline.submit({"polls_to_finish": 2}),
        "echoed": pipeline.submit({"hostile_status": "echo_credential", "polls_to_finish": 2}),
        "denied": pipeline.submit({"status_errors": [{"code": 401, "count": 5}]}),
    }
    rows = {name: pipeline.wait_state(op, timeout=40) for name, op in ops.items()}
    assert rows["succeeded"].state == "succeeded" and rows["echoed"].state == "succeeded"
    assert (rows["denied"].state, rows["denied"].escalation_reason) == (
        "escalated",
        "authorization_denied",
    )
    for name, op in ops.items():
        end = rows[name].state

        def ended(op: str = op, end: str = end) -> list[dict[str, Any]]:
            return logged(stack, "step_done", operation_id=op, to=end)

        done = wait_for(ended, timeout=10, what=f"the step that ended {name}")
        # Bound by the step, not passed by each call: the trace id rides on every line.
        assert {r["trace_id"] for r in done} == {rows[name].trace_id}
        assert all(r["level"] == "info" and r["logger"] == "jobwarden.tasks" for r in done)
    # One JSON object per line, each with an event name; nothing else but what Celery
    # prints outside its logging.
    assert [ln for ln in unstructured_lines(stack) if not _printed_outside_logging(ln)] == []
    records = log_records(stack)
    assert records and all(isinstance(r.get("event"), str) and r["event"] for r in records)
    text = worker_logs(stack)
    leaked = [form for form in _credential_forms() if form in text]
    assert leaked == []


def test_a_step_that_stops_automation_is_a_failed_task_that_is_not_retried(
    pipeline: Pipeline, stack: Stack
) -> None:
    op = pipeline.submit({"status_errors": [{"code": 403, "count": 5}]})
    row = pipeline.wait_state(op, "escalated", timeout=40)
    # Celery's line for an exception the task declares in ``throws``: a FAILURE with the
    # stop's reason in Flower's task view, logged without a traceback.
    expected = wait_for(
        lambda: [
            r
            for r in log_records(stack)
            if "raised expected: AutomationStoppedError" in r["event"] and op in r["event"]
        ],
        timeout=10,
        what="the stopped task's failure",
    )
    assert len(expected) == 1 and "authorization_denied" in expected[0]["event"]
    assert "exception" not in expected[0]
    # Not redelivered and not counted as a crash: one stop, no step failure.
    after = pipeline.row(op)
    assert after.step_failures == 0 and after.version == row.version
    assert pipeline.kinds(op).count("escalated") == 1
    assert logged(stack, "step_failed", operation_id=op) == []
    # The stop is one WARNING line with its reason and detail (README "Logs"), written by
    # the worker that stopped it, with the operation's trace id bound.
    (stop,) = wait_for(
        lambda: logged(stack, "operation_escalated", operation_id=op),
        timeout=10,
        what="the stop's WARNING line",
    )
    assert (stop["level"], stop["reason"]) == ("warning", "authorization_denied")
    assert stop["detail"] and stop["trace_id"] == row.trace_id
