"""observability.telemetry: the standard OTEL_* variables decide; off is the default and costs
nothing (no SDK module is even imported)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobwarden.observability.telemetry import TelemetryConfigError, check, requested


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


OTLP = {"OTEL_TRACES_EXPORTER": "otlp"}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "not-a-url"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://collector:4318"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://:4318/v1/traces"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:port"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", " "),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "ten"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zip"),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
        ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "-1"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4096"),  # above the default queue of 2048
        ("OTEL_TRACES_SAMPLER", "nonsense"),
        ("OTEL_TRACES_SAMPLER", "parentbased_alwayson"),
    ],
)
def test_a_bad_otel_value_is_refused_at_start_up_naming_the_variable(name: str, value: str) -> None:
    # The SDK would raise in each process, log and fall back, or fail at the first export.
    with pytest.raises(TelemetryConfigError, match=f"^{name}="):
        check({**OTLP, name: value})


def test_a_sampling_ratio_outside_0_to_1_is_refused_for_a_ratio_sampler_only() -> None:
    ratio = {**OTLP, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio"}
    with pytest.raises(TelemetryConfigError, match=r"^OTEL_TRACES_SAMPLER_ARG='1\.5'"):
        check({**ratio, "OTEL_TRACES_SAMPLER_ARG": "1.5"})
    check({**ratio, "OTEL_TRACES_SAMPLER_ARG": "0.25"})
    check({**OTLP, "OTEL_TRACES_SAMPLER": "always_on", "OTEL_TRACES_SAMPLER_ARG": "x"})


def test_good_otel_values_and_values_of_tracing_that_is_off_pass() -> None:
    check(
        {
            **OTLP,
            "OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel-collector.example:4318",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2.5",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_BSP_MAX_QUEUE_SIZE": "4096",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4096",
            "OTEL_TRACES_SAMPLER": "PARENTBASED_ALWAYS_ON",
        }
    )
    check({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "not-a-url"})


def test_off_by_default_no_opentelemetry_module_is_imported() -> None:
    # A fresh interpreter without OTEL_* variables: the app, a step and the provider edge.
    code = (
        "import sys\n"
        "from jobwarden.api.app import create_app\n"
        "import jobwarden.tasks.pipeline, jobwarden.tasks.provider.edge\n"
        "from jobwarden.observability import telemetry\n"
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


@pytest.mark.parametrize(
    ("variable", "line"),
    [
        (
            {"OTEL_TRACES_EXPORTER": "zipkin"},
            "error: OTEL_TRACES_EXPORTER='zipkin': no such span exporter is installed",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "not-a-url"},
            "error: OTEL_EXPORTER_OTLP_ENDPOINT='not-a-url': not an http:// or https:// URL "
            "with a host (such as http://otel-collector:4318)",
        ),
    ],
)
def test_jobwarden_api_refuses_a_bad_otel_setting_in_one_line(
    variable: dict[str, str], line: str
) -> None:
    env = {**os.environ, **variable}
    done = subprocess.run(
        [sys.executable, "-m", "jobwarden.cli.main", "api", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [line]


def test_the_samplers_accepted_are_those_the_sdk_knows_by_name() -> None:
    from opentelemetry.sdk.trace import sampling

    from jobwarden.observability.telemetry import _SAMPLERS

    assert set(_SAMPLERS) == set(sampling._KNOWN_SAMPLERS)
