"""Structured log lines: one JSON object with the event name, the bound operation and
trace id, for structlog's calls and the standard library's alike; readable text on
request; JSON by default when stderr is not a terminal."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import sys
from collections.abc import Iterator

import pytest

from jobwarden.observability.logs import (
    bind,
    bound,
    chosen_format,
    formatter,
    get_logger,
    uvicorn_log_config,
)


@pytest.fixture
def captured() -> Iterator[tuple[io.StringIO, logging.Handler]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream, handler
    root.removeHandler(handler)
    root.setLevel(level)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_is_one_json_object_with_the_event_and_the_bound_ids(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    stream, handler = captured
    handler.setFormatter(formatter("json"))
    log = get_logger("jobwarden.tasks")
    with bound(operation_id="op-1", step="poll", trace_id=None):
        bind(trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
        log.info("fenced_write_refused", version=7)
        logging.getLogger("celery.worker").info("a %s line", "stdlib")
    log.info("sweep_done", claimed=3)
    first, second, third = _lines(stream)
    assert first["event"] == "fenced_write_refused" and first["version"] == 7
    assert (first["operation_id"], first["trace_id"]) == (
        "op-1",
        "4bf92f3577b34da6a3ce929d0e0e4736",
    )
    assert first["level"] == "info" and first["logger"] == "jobwarden.tasks"
    assert list(first)[:3] == ["timestamp", "level", "event"]
    # The standard library's records (Celery's) take the same shape and the same ids.
    assert second["event"] == "a stdlib line" and second["operation_id"] == "op-1"
    # Outside the block nothing stays bound: the next task starts clean.
    assert "operation_id" not in third and "trace_id" not in third


def test_a_traceback_stays_inside_its_one_json_line(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    stream, handler = captured
    handler.setFormatter(formatter("json"))
    try:
        raise ValueError("boom")
    except ValueError:
        get_logger("jobwarden.api").exception("api_unexpected_error", path="/v1/x")
    (line,) = _lines(stream)
    assert line["event"] == "api_unexpected_error"
    assert isinstance(line["exception"], str) and "ValueError: boom" in line["exception"]


def test_the_console_format_is_readable_text(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    stream, handler = captured
    handler.setFormatter(formatter("console"))
    get_logger("jobwarden.tasks").info("step_done", to="succeeded")
    text = stream.getvalue()
    assert "step_done" in text and "to=succeeded" in text and not text.startswith("{")


def test_the_format_is_json_unless_stderr_is_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from jobwarden.config.settings import get_settings

    get_settings.cache_clear()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert chosen_format() == "json"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert chosen_format() == "console"
    monkeypatch.setenv("JOBWARDEN_LOG_FORMAT", "json")
    get_settings.cache_clear()
    assert chosen_format() == "json"
    get_settings.cache_clear()


def test_a_bad_log_format_is_one_settings_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jobwarden.config.settings import load_settings
    from jobwarden.models.errors import SettingsError

    monkeypatch.setenv("JOBWARDEN_LOG_FORMAT", "xml")
    with pytest.raises(SettingsError, match="JOBWARDEN_LOG_FORMAT"):
        load_settings()


def test_uvicorns_log_config_routes_its_loggers_through_the_structured_formatter() -> None:
    config = uvicorn_log_config()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        logging.config.dictConfig(config)
        (handler,) = root.handlers
        stream = io.StringIO()
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(stream)
        logging.getLogger("uvicorn.access").info("%s %s", "GET", "/metrics")
        (line,) = _lines(stream)
        assert line["event"] == "GET /metrics" and line["logger"] == "uvicorn.access"
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_uvicorns_log_config_takes_the_format_its_process_was_given() -> None:
    # serve and mcp pass their settings' log_format: logs never read jobwarden.config.
    config = uvicorn_log_config(fmt="console")
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        logging.config.dictConfig(config)
        (handler,) = root.handlers
        stream = io.StringIO()
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(stream)
        logging.getLogger("uvicorn.error").info("started")
        text = stream.getvalue()
        assert "started" in text and not text.startswith("{")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_without_a_format_given_the_variable_chooses_and_a_bad_one_is_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert chosen_format(environ={"JOBWARDEN_LOG_FORMAT": "json"}) == "json"
    assert chosen_format("console", environ={"JOBWARDEN_LOG_FORMAT": "json"}) == "console"
    # A bad value is the settings' one-line error where a process loads them; here the
    # logs still come out, in the terminal's format.
    assert chosen_format(environ={"JOBWARDEN_LOG_FORMAT": "xml"}) == "console"


def test_a_process_that_never_set_up_logging_still_writes_one_structured_line() -> None:
    import subprocess

    script = (
        "from jobwarden.observability.logs import get_logger\n"
        "get_logger('jobwarden.tasks').warning('enqueue_failed', operation_id='op-1')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    (line,) = done.stderr.splitlines()
    record = json.loads(line)  # stderr is a pipe here: JSON, not the repr of a dict
    assert (record["event"], record["operation_id"], record["level"]) == (
        "enqueue_failed",
        "op-1",
        "warning",
    )


def test_a_step_that_stops_automation_logs_one_warning_with_reason_operation_and_trace(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    from jobwarden.models.actions import EscalationReason
    from jobwarden.models.states import OperationState
    from jobwarden.tasks.pipeline import log_escalation
    from tests.unit.factories import operation

    stream, handler = captured
    handler.setFormatter(formatter("json"))
    stopped = operation(
        OperationState.escalated,
        escalation_reason=EscalationReason.rate_limited,
        escalation_detail="429 four times in a row",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
    )
    log_escalation(stopped)
    log_escalation(operation(OperationState.observing))  # not a stop: no line
    (line,) = _lines(stream)
    assert line["event"] == "operation_escalated" and line["level"] == "warning"
    assert (line["reason"], line["detail"]) == ("rate_limited", "429 four times in a row")
    assert line["operation_id"] == str(stopped.operation_id)
    assert line["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
