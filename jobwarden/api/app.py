"""The ASGI app of the HTTP door: create_app(settings) -> FastAPI.

Routers: intake (POST /v1/operations), queries, results, actions, webhooks and
schedules (/v1/schedules). Every
error answers RFC 9457 problem+json (jobwarden.api.problems). The operators'
console is served under /console by the same process: jobwarden.console.app installs
it on this app (the API never imports the console).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Final

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from redis import Redis
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from jobwarden.api import (
    actions,
    breaker,
    docs_ui,
    follow_ups,
    intake,
    pauses,
    queries,
    receipts,
    results,
    schedules,
    webhooks,
)
from jobwarden.api.access_log import AccessLog
from jobwarden.api.context import settings_of
from jobwarden.api.limits import BodyLimit
from jobwarden.api.problems import ProblemError, install_handlers
from jobwarden.api.responses import problem_answers, with_shared_schemas
from jobwarden.api.token_cache import TokenCache
from jobwarden.config.settings import Settings, get_settings
from jobwarden.models.intake.attendance import no_worker_warning
from jobwarden.models.persistence.db import snapshot
from jobwarden.observability import telemetry
from jobwarden.observability.metrics import (
    PostgresCollector,
    WebhookRefusalCollector,
    exposition,
    registry_for,
)
from jobwarden.tasks.heartbeat import last_beat
from jobwarden.tasks.provider.rate_limits import share_counts
from jobwarden.tasks.provider.webhooks import refusal_counts
from jobwarden.tasks.runtime import Runtime, build_runtime, current
from jobwarden.tasks.runtime import close as close_runtime

# The API's routers, in the order their routes are matched: one list, which the route
# tests walk too (tests/integration/test_api_routes.py), so a new router is in both.
ROUTERS: Final = tuple(
    module.router
    for module in (
        intake,
        queries,
        results,
        actions,
        pauses,
        breaker,
        follow_ups,
        webhooks,
        schedules,
        receipts,
    )
)


def _runtime_provider(settings: Settings | None, built: list[Runtime]) -> Callable[[], Runtime]:
    if settings is None:
        return current  # the process's runtime, rebuilt after a fork
    lock = threading.Lock()

    def provide() -> Runtime:
        # Built on first use, not in create_app: contracts are loaded and clients made once
        # per process, after uvicorn forks its workers.
        with lock:
            if not built:
                built.append(build_runtime(settings))
            return built[0]

    return provide


def _close_clients(built: list[Runtime], refusals: WebhookRefusalCollector) -> None:
    """Close the Redis clients an app made for itself, when the app goes away.

    An app built for given settings (tests, tools) owns its runtime and the refusal
    collector's client; dropped without a shutdown, their sockets would be closed only by
    the garbage collector, with a ResourceWarning in whichever test runs then. A weakref
    finalizer runs before the collector finalizes the sockets, so they close quietly.
    """
    for rt in built:
        close_runtime(rt)
    refusals.close()


def create_app(settings: Settings | None = None) -> FastAPI:
    """The HTTP API for ``settings`` (default: the process's JOBWARDEN_* settings)."""
    resolved = settings or get_settings()
    app = FastAPI(
        title="jobwarden",
        summary="Long-running jobs at external HTTP APIs, driven exactly once.",
        version="0.1.0",
        openapi_url="/openapi.json",
        # /docs is docs_ui's: Swagger UI from the installed files, not a CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = resolved
    built: list[Runtime] = []
    app.state.runtime = _runtime_provider(settings, built)
    ttl = resolved.api_token_cache_seconds
    app.state.token_cache = TokenCache(ttl) if ttl > 0 else None
    install_handlers(app)
    app.openapi = with_shared_schemas(app)  # type: ignore[method-assign]
    docs_ui.install(app, "/openapi.json")
    app.add_middleware(BodyLimit, max_bytes=resolved.api_max_body_bytes)
    # Added last, so outermost: its line covers every answer, a refused body's included.
    app.add_middleware(AccessLog)
    app.add_api_route(
        "/healthz",
        healthz,
        methods=["GET"],
        tags=["health"],
        operation_id="get_health",
        response_model=Health,
    )
    app.add_api_route(
        "/readyz",
        readyz,
        methods=["GET"],
        tags=["health"],
        operation_id="get_readiness",
        responses={
            200: {"model": Readiness, "description": "Postgres and Redis answer"},
            **problem_answers({503: "Postgres or Redis does not answer (down names which)"}),
        },
    )
    # Prometheus text, not JSON: kept out of the OpenAPI document (docs/api.md lists it).
    refusals = WebhookRefusalCollector(
        resolved.redis_url, resolved.key_prefix, counts=refusal_counts, shares=share_counts
    )
    app.state.metrics = registry_for(PostgresCollector(resolved.database_url), refusals)
    weakref.finalize(app, _close_clients, built, refusals)
    app.add_api_route("/metrics", metrics, methods=["GET"], include_in_schema=False)
    for router in ROUTERS:
        app.include_router(router)
    # Tracing only when the OTEL_* variables ask for it (jobwarden.observability.telemetry).
    telemetry.setup("jobwarden-api")
    telemetry.instrument_app(app)
    return app


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    postgres: str
    redis: str


def healthz() -> dict[str, str]:
    """The process is up; touches nothing else."""
    return {"status": "ok"}


def metrics(request: Request) -> Response:
    """Prometheus metrics, read from Postgres (observability.metrics); aggregates, no tenant.

    OpenMetrics when the Accept header asks for it (Prometheus does), else the text
    format 0.0.4. Without Postgres there are no figures to give: a 503 problem, so the scrape fails
    (Prometheus's ``up`` is 0) rather than reporting zeros.
    """
    try:
        body, content_type = exposition(request.app.state.metrics, request.headers.get("accept"))
    except DBAPIError:
        raise ProblemError(503, "not_ready", "not answering: postgres", down=["postgres"]) from None
    return Response(body, media_type=content_type)


def readyz(request: Request) -> JSONResponse:
    """Postgres answers SELECT 1 and Redis answers PING; else a 503 problem naming which.

    Also whether a worker consumes the operations' queue (``workers``: ok or none, and
    the no_worker warning, as a submission gives it). Reported, never failed on: the API
    records work durably without workers (it waits in Postgres, the sweeper relays it),
    so failing readiness would take intake out of the load balancer whenever workers
    are down or not yet started, turning a worker outage into an intake outage.
    """
    settings = settings_of(request)
    down: list[str] = []
    warnings: list[dict[str, object]] = []
    try:
        with snapshot(settings.database_url) as session:
            session.execute(text("SELECT 1"))
    except Exception:  # any failure means "not ready"; the kind is in the log, not the answer
        down.append("postgres")
    try:
        client = Redis.from_url(settings.redis_url, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.ping()
            newest, now = last_beat(client, settings.key_prefix, settings.queue)
            warning = no_worker_warning(
                settings.queue, newest, now, settings.worker_silence_seconds
            )
            if warning is not None:
                warnings.append(warning.as_dict())
        finally:
            client.close()
    except Exception:
        down.append("redis")
    if down:
        raise ProblemError(503, "not_ready", f"not answering: {', '.join(down)}", down=down)
    body = {
        "status": "ready",
        "postgres": "ok",
        "redis": "ok",
        "workers": "none" if warnings else "ok",
        "warnings": warnings,
    }
    headers = {intake.WARNING_HEADER: ", ".join(str(w["code"]) for w in warnings)}
    return JSONResponse(body, headers=headers if warnings else None)
