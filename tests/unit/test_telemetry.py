"""jobwarden.telemetry: the standard OTEL_* variables decide; off is the default and costs
nothing (no SDK module is even imported)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobwarden.telemetry import TelemetryConfigError, check, requested


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        # An endpoint with the exporter named "none": the exporter wins.
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "false"}, True),
    ],
)
def test_the_standard_variables_turn_tracing_on(environ: dict[str, str], on: bool) -> None:
    assert requested(environ) is on


def test_an_exporter_that_is_not_installed_is_refused_naming_the_variable() -> None:
    with pytest.raises(TelemetryConfigError, match="OTEL_TRACES_EXPORTER='zipkin'"):
        check({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(TelemetryConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL='grpc'"):
        check({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    check({"OTEL_TRACES_EXPORTER": "otlp,console"})  # both installed with [otel]


def test_off_by_default_no_opentelemetry_module_is_imported() -> None:
    # A fresh interpreter without OTEL_* variables: the app, a step and the provider edge.
    code = (
        "import sys\n"
        "from jobwarden.api.app import create_app\n"
        "import jobwarden.tasks.pipeline, jobwarden.tasks.provider_edge\n"
        "from jobwarden import telemetry\n"
        "create_app()\n"
        "ours = ('opentelemetry.sdk.trace', 'opentelemetry.instrumentation', "
        "'opentelemetry.exporter')\n"
        "print(telemetry.enabled(), sorted(m for m in sys.modules if m.startswith(ours)))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # (redis-py imports the OpenTelemetry API and metrics SDK itself when they are
    # installed; no tracer provider, exporter or instrumentation is ours to load.)
    assert done.stdout.strip() == "False []"


def test_jobwarden_api_refuses_an_exporter_it_cannot_load_in_one_line() -> None:
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "zipkin"}
    done = subprocess.run(
        [sys.executable, "-m", "jobwarden.cli", "api", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: OTEL_TRACES_EXPORTER='zipkin': no such span exporter is installed"
    ]
