"""OpenTelemetry tracing: off and free unless the standard ``OTEL_*`` variables ask for it.

On when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``, any installed
``opentelemetry_traces_exporter`` entry point) or an OTLP endpoint is set
(``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, then ``otlp``);
``OTEL_SDK_DISABLED=true`` turns it off whatever else is set. Off, nothing of the SDK is
imported and every helper here is one boolean test. On, it needs the ``[otel]`` extra;
without it start-up stops with one line naming the variable.

The rest is the SDK's own reading of the variables: ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (the resource), ``OTEL_TRACES_SAMPLER`` (default: follow the
parent's sampling, so a caller's ``traceparent`` flag decides), ``OTEL_EXPORTER_OTLP_*``
(endpoint, headers, timeout), ``OTEL_BSP_*`` (batching).

One trace per operation: the submission's span (``jobwarden.submit``, a child of the
caller's ``traceparent`` or of the HTTP request's span) is the parent of every step's
span (``jobwarden.step``) and each step's provider requests: client spans from the
OpenTelemetry httpx instrumentation (``instrument_client``), whose context is the
``traceparent`` the provider receives; this module's own client span only where a
provider plugin signs the request (``request_span``). A step runs in a worker, often
woken by the sweeper rather than by a message that carried the context, so the
submission's context is recorded in the intent event (``traceparent`` in its excerpt)
and read back by the step (once per operation and process).
"""

from __future__ import annotations

import os
import secrets
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from jobwarden.models.errors import SettingsError
from jobwarden.models.intake.trace_context import trace_id_from

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer


class TelemetryConfigError(SettingsError):
    """The OTEL_* variables ask for something this installation cannot do; names the
    variable (a SettingsError: the CLI prints it as one line and exits 2)."""


def requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard variables turn tracing on (see the module docstring)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


_lock = threading.Lock()
_tracer: list[Tracer] = []  # set once per process by setup()
_pid: list[int] = []


def enabled() -> bool:
    return bool(_tracer)


def check(environ: Mapping[str, str] = os.environ) -> None:
    """Raise TelemetryConfigError, naming the variable, when tracing is asked for but
    cannot be set up (before a worker forks its pool, so the error is the start-up's)."""
    if not requested(environ):
        return
    try:
        import opentelemetry.sdk.trace  # noqa: F401 - only whether it is installed
    except ImportError:
        raise TelemetryConfigError(_MISSING) from None
    _exporters(environ, make=False)
    check_values(environ)


# The SDK reads these itself, and on a bad value it raises (a traceback in each process),
# logs an error and falls back to its default, or fails at the first export, long after
# start-up. An operator who set one wants it to hold: it is refused at start-up instead.
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_SECONDS = ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
_COMPRESSIONS = ("OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION")
_FILES = tuple(
    f"OTEL_EXPORTER_OTLP_{scope}{name}"
    for scope in ("", "TRACES_")
    for name in ("CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY")
)
# The batch span processor's integers (BatchSpanProcessor._validate_arguments): each > 0.
_BATCH = {
    "OTEL_BSP_SCHEDULE_DELAY": 5000,
    "OTEL_BSP_EXPORT_TIMEOUT": 30000,
    "OTEL_BSP_MAX_QUEUE_SIZE": 2048,
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 512,
}
# The samplers the SDK's TracerProvider knows by name (sampling._KNOWN_SAMPLERS: it reads
# no entry points); any other name it replaces by its default, with a warning.
_SAMPLERS = (
    "always_on",
    "always_off",
    "parentbased_always_on",
    "parentbased_always_off",
    "traceidratio",
    "parentbased_traceidratio",
)
_RATIO_SAMPLERS = ("traceidratio", "parentbased_traceidratio")


def _set(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


def _endpoint(name: str, value: str) -> None:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise TelemetryConfigError(
            f"{name}={value!r}: not an http:// or https:// URL with a host "
            "(such as http://otel-collector:4318)"
        )


def _batch_sizes(environ: Mapping[str, str]) -> None:
    sizes = {}
    for name, default in _BATCH.items():
        value = _set(environ, name)
        try:
            sizes[name] = default if value is None else int(value)
        except ValueError:
            sizes[name] = 0
        if sizes[name] <= 0:
            raise TelemetryConfigError(f"{name}={value!r}: not a whole number above 0")
    if sizes["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] > sizes["OTEL_BSP_MAX_QUEUE_SIZE"]:
        raise TelemetryConfigError(
            f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE={sizes['OTEL_BSP_MAX_EXPORT_BATCH_SIZE']}: above "
            f"OTEL_BSP_MAX_QUEUE_SIZE={sizes['OTEL_BSP_MAX_QUEUE_SIZE']}"
        )


def _sampler(environ: Mapping[str, str]) -> None:
    sampler = _set(environ, "OTEL_TRACES_SAMPLER")
    if sampler is not None and sampler.lower() not in _SAMPLERS:
        raise TelemetryConfigError(
            f"OTEL_TRACES_SAMPLER={sampler!r}: not a sampler; one of {', '.join(_SAMPLERS)}"
        )
    ratio = _set(environ, "OTEL_TRACES_SAMPLER_ARG")
    if ratio is not None and (sampler or "").lower() in _RATIO_SAMPLERS:
        try:
            fraction = float(ratio)
        except ValueError:
            fraction = -1.0
        if not 0.0 <= fraction <= 1.0:
            raise TelemetryConfigError(
                f"OTEL_TRACES_SAMPLER_ARG={ratio!r}: not a sampling ratio from 0 to 1"
            )


def check_values(environ: Mapping[str, str] = os.environ) -> None:
    """Raise TelemetryConfigError naming the first OTEL_* variable whose value the SDK
    would reject, ignore or fail on later: endpoints, timeouts, compression, TLS files,
    the batch processor's sizes, the sampler and its ratio."""
    for name in _ENDPOINTS:
        if name in environ:
            # Set but empty, the exporter would send to "/v1/traces" and fail at each export.
            _endpoint(name, environ[name].strip())
    for name in _SECONDS:
        if (value := _set(environ, name)) is not None:
            try:
                seconds = float(value)
            except ValueError:
                seconds = 0.0
            if not seconds > 0:
                raise TelemetryConfigError(f"{name}={value!r}: not a number of seconds above 0")
    for name in _COMPRESSIONS:
        value = _set(environ, name)
        if value is not None and value.lower() not in ("gzip", "deflate", "none"):
            raise TelemetryConfigError(f"{name}={value!r}: not gzip, deflate or none")
    for name in _FILES:
        value = _set(environ, name)
        if value is not None and not os.access(value, os.R_OK):
            raise TelemetryConfigError(f"{name}={value!r}: no file readable there")
    _batch_sizes(environ)
    _sampler(environ)


_MISSING = (
    "OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT ask for tracing, but the "
    "OpenTelemetry SDK is not installed: pip install '.[otel]' in the jobwarden checkout"
)


def _exporters(environ: Mapping[str, str], *, make: bool = True) -> list[Any]:
    from importlib.metadata import entry_points

    names = [
        n.strip().lower()
        for n in (environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")
        if n.strip()
    ]
    made = []
    for name in names:
        if name == "none":
            continue
        wanted = name
        if name == "otlp":
            protocol = (
                environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf"
            )
            if protocol != "http/protobuf":
                raise TelemetryConfigError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: jobwarden[otel] exports OTLP "
                    "over http/protobuf; install an exporter for that protocol or unset it"
                )
            wanted = "otlp_proto_http"
        found = list(entry_points(group="opentelemetry_traces_exporter", name=wanted))
        if not found:
            raise TelemetryConfigError(
                f"OTEL_TRACES_EXPORTER={name!r}: no such span exporter is installed"
            )
        made.append(found[0].load()() if make else found[0])
    return made


def setup(service: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Configure tracing for this process when the variables ask for it; True if on.

    Idempotent per process: a forked child (a Celery pool process) configures its own.
    Raises TelemetryConfigError naming the variable when it cannot be done.
    """
    if not requested(environ):
        return False
    with _lock:
        if _tracer and _pid == [os.getpid()]:
            return True
        try:
            from opentelemetry import trace
            from opentelemetry.instrumentation.celery import CeleryInstrumentor
            from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor  # noqa: F401
            from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            raise TelemetryConfigError(_MISSING) from None
        check_values(environ)
        if not _tracer:
            # The stable HTTP conventions (url.full, http.request.method,
            # http.response.status_code) for the instrumentations' spans, the names
            # jobwarden's own client spans use; an operator's own setting wins.
            os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "http")
            # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, read by Resource.create, win.
            resource = Resource.create(
                {} if environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service}
            )
            provider = TracerProvider(resource=resource)
            for exporter in _exporters(environ):
                provider.add_span_processor(BatchSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            # Task messages carry the publisher's context; every query is a span.
            CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]
            PsycopgInstrumentor().instrument(skip_dep_check=True)
            _tracer.append(trace.get_tracer("jobwarden"))
        # A fork keeps the provider (the SDK restarts its export thread in the child).
        _pid[:] = [os.getpid()]
        return True


def instrument_app(app: Any) -> None:
    """The FastAPI app's server spans (a caller's traceparent is their parent)."""
    if not enabled():
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    # /metrics and the probes are scraped every few seconds: no trace for them.
    FastAPIInstrumentor.instrument_app(app, excluded_urls="/metrics,/healthz,/readyz")


def shutdown() -> None:
    """Export what is buffered (a process about to exit)."""
    if not enabled():
        return
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    flush = getattr(provider, "shutdown", None)
    if flush is not None:
        flush()


def _parent(header: str | None) -> Any:
    """The context a valid ``traceparent`` names, else the current one."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    wanted = trace_id_from(header)
    if wanted is None:
        return None  # the current context
    current = trace.get_current_span().get_span_context()
    # Over HTTP the request's span already continues the caller's trace: nest under it.
    if current.is_valid and f"{current.trace_id:032x}" == wanted:
        return None
    assert header is not None
    return TraceContextTextMapPropagator().extract({"traceparent": header.strip(" \t")})


def header_of(span: Span) -> str:
    """The W3C traceparent of ``span``: its real ids and its sampling decision."""
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def current_header(trace_id: str) -> str | None:
    """The current span's traceparent when tracing is on and it is in ``trace_id``."""
    if not enabled():
        return None
    from opentelemetry import trace

    span = trace.get_current_span()
    ctx = span.get_span_context()
    if not ctx.is_valid or f"{ctx.trace_id:032x}" != trace_id:
        return None
    return header_of(span)


@contextmanager
def submit_span(trace_parent: str | None) -> Iterator[str | None]:
    """The submission's span; yields its traceparent (None when tracing is off)."""
    if not enabled():
        yield None
        return
    with _tracer[0].start_as_current_span(
        "jobwarden.submit", context=_parent(trace_parent)
    ) as span:
        yield header_of(span)


# The submission context of recent operations: it never changes, so a step reads it once.
_contexts: OrderedDict[uuid.UUID, str | None] = OrderedDict()
_CONTEXTS_KEPT = 10_000


def _remembered(operation_id: uuid.UUID, load: Callable[[], str | None]) -> str | None:
    with _lock:
        if operation_id in _contexts:
            _contexts.move_to_end(operation_id)
            return _contexts[operation_id]
    found = load()
    with _lock:
        _contexts[operation_id] = found
        if len(_contexts) > _CONTEXTS_KEPT:
            _contexts.popitem(last=False)
    return found


@contextmanager
def step_span(
    step: str, operation_id: uuid.UUID, trace_id: str, load_traceparent: Callable[[], str | None]
) -> Iterator[None]:
    """A step's span in the operation's trace; nothing when tracing is off.

    Its parent is the current span when that is already in the operation's trace (a
    task message that carried the context), else the submission's recorded context
    (``load_traceparent()``, called once per operation and process): the submission's
    span, or the caller's traceparent when the submitting process did not trace.
    """
    if not enabled():
        yield
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    current = trace.get_current_span().get_span_context()
    parent = None
    if not (current.is_valid and f"{current.trace_id:032x}" == trace_id):
        recorded = _remembered(operation_id, load_traceparent)
        if recorded is None:
            # Submitted with no context recorded (before tracing was on, with no caller's
            # traceparent): the operation's trace id, under a parent nobody exported.
            recorded = f"00-{trace_id}-{secrets.token_hex(8)}-01"
        parent = TraceContextTextMapPropagator().extract({"traceparent": recorded})
    attributes = {"jobwarden.step": step, "jobwarden.operation_id": str(operation_id)}
    with _tracer[0].start_as_current_span(
        f"jobwarden.step {step}", context=parent, attributes=attributes
    ):
        yield


# The purpose of the provider request being sent (create, status, result, ...): read by the
# httpx instrumentation's hook, which sees only the HTTP request.
_purpose: ContextVar[str | None] = ContextVar("jobwarden_request_purpose", default=None)


def instrument_client(client: Any) -> None:
    """Client spans for a provider edge's httpx client, from the OpenTelemetry httpx
    instrumentation (semantic conventions, the ``traceparent`` injected from its own
    span); nothing when tracing is off. Its hook adds what the edge knows: the request's
    purpose (``jobwarden.request``), and the URL without its query (a presigned
    download's signature is a credential; the library redacts only a few known names)."""
    if not enabled():
        return
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    HTTPXClientInstrumentor.instrument_client(client, request_hook=_request_hook)


def _request_hook(span: Span, request: Any) -> None:
    if not span.is_recording():
        return
    purpose = _purpose.get()
    if purpose is not None:
        span.set_attribute("jobwarden.request", purpose)
    url = str(request.url)
    if "?" in url:
        shown = url.split("?", 1)[0]
        # Both names: the stable conventions' and the old ones (OTEL_SEMCONV_STABILITY_OPT_IN).
        for name in ("url.full", "http.url"):
            span.set_attribute(name, shown)


@contextmanager
def request_span(method: str, url: str, purpose: str, *, signed: bool) -> Iterator[Span | None]:
    """A provider request's client span; yields ours, or None when the httpx
    instrumentation makes it (or tracing is off).

    ``signed``: a provider plugin rewrites the request after its headers are built
    (signing them, ``traceparent`` included). The instrumentation injects its
    ``traceparent`` in the transport, after the plugin, which would break such a
    signature; so for a plugin's requests the instrumentation is suppressed and this
    module's own span is the client span, its ``traceparent`` fixed before signing.
    """
    if not enabled():
        yield None
        return
    if not signed:
        token = _purpose.set(purpose)
        try:
            yield None
        finally:
            _purpose.reset(token)
        return
    from opentelemetry.instrumentation.utils import suppress_http_instrumentation
    from opentelemetry.trace import SpanKind

    # The URL without its query: a presigned download's signature is a credential.
    shown = url.split("?", 1)[0]
    attributes = {
        "http.request.method": method,
        "url.full": shown,
        "jobwarden.request": purpose,
    }
    with (
        suppress_http_instrumentation(),
        _tracer[0].start_as_current_span(
            method, kind=SpanKind.CLIENT, attributes=attributes
        ) as span,
    ):
        yield span


def answered(span: Span | None, status: int | None) -> None:
    """Record the provider's status on our own request span (5xx and no answer are
    errors); the instrumentation's spans record theirs."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    if status is not None:
        span.set_attribute("http.response.status_code", status)
    if status is None or status >= 500:
        span.set_status(Status(StatusCode.ERROR))
