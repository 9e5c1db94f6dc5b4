"""One structured line per HTTP request: ``http_request`` with method, path, status,
duration, trace id and tenant (jobwarden.observability.logs formats it like every other line).

uvicorn's own access line is one preformatted string (``'127.0.0.1:5 - "GET /x" 200'``)
with no duration, trace id or tenant, so ``jobwarden api`` turns it off and this ASGI
middleware writes the line instead. It is a plain ASGI middleware, not Starlette's
BaseHTTPMiddleware, so a streamed response (a result download) streams through it.

The tenant is known only once a route has authenticated the caller: the API's
``require`` and the console's session put it in the request's state (``note_tenant``),
which this middleware reads after the response. The trace id is the one the answer
carries in its ``traceparent`` (an intake answer names the operation's trace), else the
caller's; lines logged while the request is served carry it too.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobwarden.models.intake.trace_context import trace_id_from
from jobwarden.observability.logs import bound, get_logger

log = get_logger("jobwarden.access")

_TENANT = "jobwarden_tenant"  # the request state attribute note_tenant sets


def note_tenant(request: Request, tenant: str) -> None:
    """Record the authenticated tenant of ``request`` for its access line."""
    request.state.jobwarden_tenant = tenant


def _header(headers: Any, name: bytes) -> str | None:
    for key, value in headers or ():
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # Routes may copy the scope; the state dict is shared by reference, so the tenant
        # a route notes is seen here.
        state: dict[str, Any] = scope.setdefault("state", {})
        started = time.perf_counter()
        asked = trace_id_from(_header(scope.get("headers"), b"traceparent"))
        answer: dict[str, Any] = {"status": None, "trace_id": None}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                answer["trace_id"] = trace_id_from(_header(message.get("headers"), b"traceparent"))
            await send(message)

        try:
            with bound(trace_id=asked) if asked else nullcontext():
                await self.app(scope, receive, sending)
        except Exception:
            # The error itself is logged by whoever handles it; the line says it was a 500.
            answer["status"] = answer["status"] or 500
            raise
        finally:
            log.info(
                "http_request",
                method=scope.get("method"),
                path=scope.get("path"),
                # None: the client went away before any answer started.
                status=answer["status"],
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
                trace_id=answer["trace_id"] or asked,
                tenant=state.get(_TENANT),
                client=(scope.get("client") or (None,))[0],
            )
