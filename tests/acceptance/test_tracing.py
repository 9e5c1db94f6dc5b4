"""OpenTelemetry (observability.telemetry): one trace from an HTTP submission to the collected
result, continuing the caller's traceparent, with the caller's sampling.

Real processes, configured only by the standard OTEL_* variables: `jobwarden api` and a
Celery worker of this test's own (its own queue, so the shared stack's workers, which
run without tracing, never take its tasks) export with the SDK's OTLP exporter to a
receiver this test starts (tests/otlp_receiver.py). An in-memory exporter cannot see
into other processes; running the worker in this process would test a different pool
than operators run, so the test reads what the exporters really sent.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobwarden.demo.harness import REPO, Stack, wait_for
from tests.acceptance.conftest import Pipeline
from tests.otlp_receiver import Received, otlp_receiver

CALLER_SPAN = "00f067aa0ba902b7"
CLIENT = 3  # opentelemetry.proto.trace.v1.Span.SpanKind.SPAN_KIND_CLIENT
HTTPX = "opentelemetry.instrumentation.httpx"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def traced(worker_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[str, Received, str]]:
    """`jobwarden api` and one worker exporting to a receiver; yields the API's URL, the
    receiver and the worker's queue."""
    queue = f"traced-{secrets.token_hex(4)}"
    with otlp_receiver() as (endpoint, received):
        env = {
            **worker_env,
            "JOBWARDEN_QUEUE": queue,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            # Export within a tenth of a second, not the default five.
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "JOBWARDEN_LOG_FORMAT": "json",
        }
        stack = Stack(env, log_dir=tmp_path)
        port = _free_port()
        api = None
        try:
            stack.start_worker("otel", concurrency=1)
            with (tmp_path / "api.log").open("wb") as log:
                api = subprocess.Popen(
                    [sys.executable, "-m", "jobwarden.cli.main", "api", "--port", str(port)],
                    cwd=REPO,
                    env={**os.environ, **env, "JOBWARDEN_API_HOST": "127.0.0.1"},
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
            base = f"http://127.0.0.1:{port}"

            def answering() -> bool:
                assert api is not None and api.poll() is None, (tmp_path / "api.log").read_text()
                try:
                    return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
                except httpx.TransportError:
                    return False

            # Starting uvicorn with the OpenTelemetry SDK takes seconds; on a busy machine
            # (CI shares it) it took over 30.
            wait_for(answering, timeout=90, what="jobwarden api to answer")
            stack.wait_ready("otel")
            yield base, received, queue
        finally:
            if api is not None:
                api.terminate()
                api.wait(timeout=30)
            stack.stop()


def _submit(base: str, token: str, traceparent: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{base}/v1/operations",
        json={
            "provider": "sandbox",
            "command": {"kind": "export", "behaviour": {"polls_to_finish": 2}},
        },
        headers={
            "Authorization": f"Bearer {token}",
            "Idempotency-Key": secrets.token_hex(8),
            "traceparent": traceparent,
        },
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_a_callers_trace_continues_through_intake_every_step_and_every_provider_request(
    traced: tuple[str, Received, str], pipeline: Pipeline, database_url: str
) -> None:
    from jobwarden.api.auth import Scope, create_token

    base, received, _ = traced
    token = create_token(
        database_url, tenant="traced", name=secrets.token_hex(4), scopes=(Scope.submit,)
    ).token
    trace = secrets.token_hex(16)
    op = _submit(base, token, f"00-{trace}-{CALLER_SPAN}-01")
    assert op["trace_id"] == trace
    pipeline.created.append(op["operation_id"])
    assert pipeline.wait_state(op["operation_id"]).state == "succeeded"

    def collected() -> list[dict[str, Any]]:
        spans = received.of_trace(trace)
        return spans if any(s["name"] == "jobwarden.step collect" for s in spans) else []

    spans = wait_for(collected, timeout=30, what="the collect step's span")
    by_id = {s["span_id"]: s for s in spans}
    names = [s["name"] for s in spans]
    # The HTTP request's span continues the caller's: its parent is the caller's span.
    (server,) = [
        s for s in spans if s["service"] == "jobwarden-api" and s["parent_id"] == CALLER_SPAN
    ]
    (submit,) = [s for s in spans if s["name"] == "jobwarden.submit"]
    assert by_id[submit["parent_id"]] == server or submit["parent_id"] in by_id
    steps = [s for s in spans if s["name"].startswith("jobwarden.step ")]
    assert [s["name"] for s in steps].count("jobwarden.step poll") >= 2, names
    assert {"jobwarden.step create", "jobwarden.step collect"} <= set(names)
    assert all(s["service"] == "jobwarden-worker" for s in steps)
    # One connected trace: every span but the server's hangs from another exported span.
    assert all(s["parent_id"] in by_id for s in spans if s is not server)
    # Every provider request left with the traceparent of its own exported client span:
    # real ids, the caller's sampling.
    row = pipeline.row(op["operation_id"])
    sent = pipeline.creates(op["operation_id"]) + pipeline.job_requests(op["operation_id"])
    assert len(sent) >= 4  # the create, two status requests, the result
    # The client spans are the OpenTelemetry httpx instrumentation's (the sandbox has no
    # signing plugin), with what the edge adds: the request's purpose.
    clients = {s["span_id"]: s for s in spans if s["kind"] == CLIENT and s["scope"] == HTTPX}
    for request in sent:
        version, trace_id, parent, flags = request["traceparent"].split("-")
        assert (version, trace_id, flags) == ("00", trace, "01")
        assert parent in clients, request
        assert by_id[clients[parent]["parent_id"]]["name"].startswith("jobwarden.step ")
    attributes = [clients[r["traceparent"].split("-")[2]]["attributes"] for r in sent]
    assert {a["jobwarden.request"] for a in attributes} >= {"create", "status", "result"}
    assert all(a["http.request.method"] in ("GET", "POST") for a in attributes)
    assert all(a["http.response.status_code"] in (200, 201, 202) for a in attributes)
    assert all("?" not in a["url.full"] for a in attributes)
    assert row.trace_id == trace


def test_a_caller_that_does_not_sample_gets_no_spans_and_its_flag_reaches_the_provider(
    traced: tuple[str, Received, str], pipeline: Pipeline, database_url: str
) -> None:
    from jobwarden.api.auth import Scope, create_token

    base, received, _ = traced
    token = create_token(
        database_url, tenant="traced", name=secrets.token_hex(4), scopes=(Scope.submit,)
    ).token
    trace, sampled = secrets.token_hex(16), secrets.token_hex(16)
    op = _submit(base, token, f"00-{trace}-{CALLER_SPAN}-00")
    pipeline.created.append(op["operation_id"])
    assert pipeline.wait_state(op["operation_id"]).state == "succeeded"
    # A sampled operation after it: once its spans arrived, the unsampled one's would have.
    after = _submit(base, token, f"00-{sampled}-{CALLER_SPAN}-01")
    pipeline.created.append(after["operation_id"])
    assert pipeline.wait_state(after["operation_id"]).state == "succeeded"
    wait_for(
        lambda: any(s["name"] == "jobwarden.step collect" for s in received.of_trace(sampled)),
        timeout=30,
        what="the sampled operation's spans",
    )
    assert received.of_trace(trace) == []
    sent = pipeline.creates(op["operation_id"]) + pipeline.job_requests(op["operation_id"])
    assert sent and all(
        r["traceparent"].startswith(f"00-{trace}-") and r["traceparent"].endswith("-00")
        for r in sent
    )


def test_a_python_submission_that_does_not_trace_still_parents_the_steps_on_the_callers_span(
    traced: tuple[str, Received, str], pipeline: Pipeline
) -> None:
    from jobwarden.config.settings import get_settings
    from jobwarden.tasks.intake import submit_operation
    from jobwarden.tasks.runtime import build_runtime

    _, received, queue = traced
    # This process does not trace (no OTEL_* here); the worker it hands the work to does.
    rt = build_runtime(get_settings().model_copy(update={"queue": queue}))
    trace = secrets.token_hex(16)
    try:
        result = submit_operation(
            runtime=rt,
            tenant="traced",
            provider="sandbox",
            idempotency_key=secrets.token_hex(8),
            command={"kind": "export", "behaviour": {"polls_to_finish": 1}},
            requested_by="pytest",
            trace_parent=f"00-{trace}-{CALLER_SPAN}-01",
        )
    finally:
        rt.http.close()
        rt.redis.close()
    assert result.operation_id is not None and result.trace_id == trace
    pipeline.created.append(result.operation_id)
    assert pipeline.wait_state(result.operation_id).state == "succeeded"

    def collected() -> list[dict[str, Any]]:
        spans = received.of_trace(trace)
        return spans if any(s["name"] == "jobwarden.step collect" for s in spans) else []

    spans = wait_for(collected, timeout=30, what="the collect step's span")
    # The steps hang from the caller's own span (the messages this process published
    # carried no context, so each step finds the recorded one); all else from our spans.
    steps = {s["name"] for s in spans if s["parent_id"] == CALLER_SPAN}
    assert {"jobwarden.step create", "jobwarden.step collect"} <= steps
    by_id = {s["span_id"] for s in spans}
    assert all(s["parent_id"] in by_id | {CALLER_SPAN} for s in spans)
    # And each provider request carried its own exported client span's id.
    sent = pipeline.creates(result.operation_id) + pipeline.job_requests(result.operation_id)
    assert sent and all(r["traceparent"].split("-")[2] in by_id for r in sent)


@pytest.mark.parametrize(
    ("variable", "line"),
    [
        (
            {"OTEL_TRACES_EXPORTER": "nonsense"},
            "error: OTEL_TRACES_EXPORTER='nonsense': no such span exporter is installed",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "not-a-url"},
            "error: OTEL_EXPORTER_OTLP_ENDPOINT='not-a-url': not an http:// or https:// URL "
            "with a host (such as http://otel-collector:4318)",
        ),
    ],
)
@pytest.mark.timeout(180)
def test_a_worker_refuses_a_bad_otel_setting_in_one_line_with_exit_status_2(
    database_url: str, variable: dict[str, str], line: str
) -> None:
    # Celery logs an exception raised by a start-up signal handler (a traceback) and starts
    # anyway; the worker must stop instead, as `jobwarden api` does (tests/unit/
    # test_telemetry.py). Its own queue: were it to start, it takes nobody's tasks.
    queue = f"refused-{secrets.token_hex(4)}"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "celery", "-A", "jobwarden.config.celery_app", "worker"),
            *("--pool=prefork", "--concurrency=1", "-Q", queue, "--without-gossip"),
            *("--without-mingle", "--loglevel=INFO"),
        ],
        cwd=REPO,
        env={**os.environ, "JOBWARDEN_QUEUE": queue, **variable},  # this run's servers
        capture_output=True,
        text=True,
        timeout=120,  # a loaded machine takes tens of seconds to start Celery
        check=False,
    )
    assert (done.returncode, done.stderr.strip().splitlines()[-1:]) == (2, [line])
    assert "Traceback" not in done.stdout + done.stderr
