"""The MCP door for agents (issue 13): ``jobwarden mcp`` over stdio or streamable HTTP.

Built on the official SDK (``mcp.server.mcpserver.MCPServer``). Four tools call the
functions every other door calls: ``start_operation`` builds the HTTP door's
``SubmissionRequest`` and calls tasks/intake.py ``submit_request`` with ``door="mcp"``,
so it fingerprints, claims the key and writes the intake log exactly as the Python
call, the Celery task and the HTTP API do; reads and the cancel go through the same
store queries and intervention.

The tenant comes from an API token (jobwarden/api/auth.py ``principal_of``), never
from a tool argument. Over stdio the token is read once from an environment
variable and looked up again on every call, so a revoked token stops at its next
call; over HTTP every request carries ``Authorization: Bearer`` (RFC 6750) and a
request without a live token is refused with 401 before the SDK sees it. An
operation of another tenant, like an unknown or malformed id, is ``not_found``.
Tool errors (``isError``) name the field or the rule; an unexpected failure reaches
the client as the SDK's bare "Error executing tool", never as a traceback.
"""

from __future__ import annotations

import logging.config
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import anyio.to_thread
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from jobwarden.api.actions import Text
from jobwarden.api.auth import TOKEN_PREFIX, Principal, principal_of
from jobwarden.api.auth import Scope as TokenScope
from jobwarden.api.intake import Bounds, SubmissionBody, caller_of, submission_request
from jobwarden.api.problems import ProblemError, problem_response
from jobwarden.api.queries import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor, result_of
from jobwarden.api.queries import operation_view as http_operation_view
from jobwarden.api.server import BoundedReadProtocol
from jobwarden.api.views import EscalationCounts, OperationView, WaitingOperation, operation_links
from jobwarden.config.settings import Settings
from jobwarden.mcp import pauses as pause_tools
from jobwarden.models.errors import LostRaceError, RefusedInputError, SettingsError
from jobwarden.models.intake.follow_ups import AmountLimitError, FollowUpNotAllowedError
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import query_store
from jobwarden.models.persistence.db import snapshot, transaction
from jobwarden.models.states import TERMINAL
from jobwarden.observability import telemetry
from jobwarden.observability.logs import uvicorn_log_config
from jobwarden.tasks.follow_ups import start_follow_up
from jobwarden.tasks.humans import interventions
from jobwarden.tasks.intake import SubmitOutcome, submit_request
from jobwarden.tasks.receipts import ReceiptUnavailableError, receipt_of
from jobwarden.tasks.runtime import Runtime, build_runtime

RETRY_RULE = (
    "Retry rule: on a timeout or a lost answer, call start_operation again with the same "
    "operation_key and the same arguments; you get the same operation back (outcome "
    "'replayed', same operation_id), never a second one. On outcome 'conflict', stop: that "
    "key already names a different request, and nothing was changed; ask for a new operation "
    "instead of retrying. Never invent a new operation_key for the same intent: a new key is "
    "a second operation."
)

INSTRUCTIONS = (
    "jobwarden drives long-running jobs at external HTTP APIs exactly once. Start one with "
    "start_operation and a key you choose once per intent, follow it with get_operation, "
    "stop it with cancel_operation, and see what waits for a human with list_escalations. "
    + RETRY_RULE
)

# What the agent does after each answer, in the answer itself.
NEXT_STEP: dict[SubmitOutcome, str] = {
    SubmitOutcome.created: "recorded; follow it with get_operation(operation_id)",
    SubmitOutcome.replayed: (
        "this key already holds this very request: the same operation, nothing new was "
        "created; follow it with get_operation(operation_id)"
    ),
    SubmitOutcome.in_progress: (
        "another call with this key is still being recorded: call again with the same "
        "operation_key and arguments in a second"
    ),
    SubmitOutcome.conflict: (
        "stop: this operation_key was used for a different request and that operation is "
        "unchanged; ask for a new operation, do not retry or change the key yourself"
    ),
    SubmitOutcome.duplicate_event: (
        "this source_event_id already has an operation (operation_id); nothing new was created"
    ),
}

# Where the HTTP middleware leaves the request's principal for the tools (the ASGI scope's
# state, which the Starlette request handed to the tool reads).
PRINCIPAL_STATE = "jobwarden.principal"


class StartAnswer(BaseModel):
    """start_operation's answer: the same outcomes as every other door."""

    outcome: Literal["created", "replayed", "in_progress", "conflict", "duplicate_event"]
    operation_id: str | None = Field(description="None only while in_progress")
    state: str | None = Field(description="the operation's state now; None while in_progress")
    fingerprint: str = Field(description="sha256 over method, route, tenant, provider, command")
    trace_id: str | None
    next_step: str = Field(description="what to do now")
    warnings: list[str] = Field(
        default_factory=list,
        description="advice about now, e.g. no worker consumes the operation's queue: it "
        "waits until one starts (tell a person; retrying does not help)",
    )


class CancelAnswer(BaseModel):
    operation_id: str
    state: str = Field(
        description="cancel_requested is our fact (we asked); cancelled is the provider's"
    )


class EscalationsAnswer(BaseModel):
    counts: EscalationCounts
    escalations: list[WaitingOperation]
    next_cursor: str | None = Field(description="pass as cursor for the next page; None: last")


@dataclass(frozen=True, slots=True)
class Backend:
    """What the tools need: the database, the runtime, and how a call names its token."""

    database_url: str
    runtime: Callable[[], Runtime]
    # stdio: the one token the process acts with; None over HTTP (each request's own).
    stdio_token: str | None


def _unauthenticated() -> ToolError:
    return ToolError("unauthenticated: the API token is unknown or revoked")


def _principal(backend: Backend, ctx: Context, scope: TokenScope) -> Principal:
    """The caller's principal, which must hold ``scope``; a tool error otherwise."""
    if backend.stdio_token is not None:
        principal = principal_of(backend.database_url, backend.stdio_token)
    else:
        request = ctx.request_context.request
        state = getattr(request, "scope", {}).get("state") or {}
        principal = state.get(PRINCIPAL_STATE)
    if not isinstance(principal, Principal):
        raise _unauthenticated()
    if scope not in principal.scopes:
        have = sorted(s.value for s in principal.scopes)
        raise ToolError(
            f"insufficient_scope: this tool needs the {scope.value!r} scope; the token has {have}"
        )
    return principal


def _owned(backend: Backend, principal: Principal, operation_id: str) -> Operation:
    """The principal's tenant's operation; one not_found for unknown, malformed or foreign."""
    try:
        parsed = uuid.UUID(operation_id)
    except ValueError:
        parsed = None
    row = None
    if parsed is not None:
        with snapshot(backend.database_url) as session:
            row = query_store.operation_for_tenant(session, principal.tenant, parsed)
    if row is None:
        raise ToolError(f"not_found: operation_id {operation_id!r}: no such operation")
    return row


_BOUNDS = frozenset(Bounds.model_fields)


def _receipt(settings: Settings, rt: Runtime, operation_id: uuid.UUID) -> dict[str, Any]:
    """The receipt (jobwarden/tasks/receipts.py); unavailable: one line saying why."""
    try:
        document = receipt_of(settings, rt, operation_id, now=datetime.now(UTC))
    except (SettingsError, ReceiptUnavailableError) as exc:
        raise ToolError(f"receipt_unavailable: {exc}") from None
    if document is None:
        raise ToolError(f"not_found: operation_id {str(operation_id)!r}: no such operation")
    return document


def _refusal(exc: RefusedInputError) -> ToolError:
    """The intake's refusal in this door's field names (operation_key, bounds.*)."""
    message = str(exc)
    field = message.split(" ", 1)[0]
    if field == "idempotency_key":
        message = "operation_key" + message.removeprefix("idempotency_key")
    elif field in _BOUNDS:
        message = "bounds." + message
    return ToolError(f"invalid_submission: {message}")


def _start(
    backend: Backend,
    ctx: Context,
    operation_key: str,
    provider: str,
    command: dict[str, Any],
    source_event_id: str | None,
    bounds: Bounds | None,
    concurrency_key: str | None,
    business_deadline: str | float | None,
    priority: int | None = None,
) -> StartAnswer:
    principal = _principal(backend, ctx, TokenScope.submit)
    # The tool's own schema validated these; SubmissionBody's stricter HTTP rules do not apply.
    body = SubmissionBody.model_construct(
        provider=provider,
        command=command,
        source_event_id=source_event_id,
        bounds=bounds,
        concurrency_key=concurrency_key,
        business_deadline=business_deadline,
        priority=priority,
    )
    # SEP-414: W3C trace context travels in the request's _meta (not a tool argument); a
    # valid traceparent gives the operation its trace id, as the header does over HTTP.
    trace_parent = (ctx.request_context.meta or {}).get("traceparent")
    wanted = submission_request(
        principal, operation_key, body, trace_parent if isinstance(trace_parent, str) else None
    )
    try:
        result = submit_request(
            wanted, door="mcp", caller=caller_of(principal), runtime=backend.runtime()
        )
    except RefusedInputError as exc:
        raise _refusal(exc) from None
    return StartAnswer(
        outcome=result.outcome.value,
        operation_id=result.operation_id,
        state=result.state,
        fingerprint=result.fingerprint,
        trace_id=result.trace_id,
        next_step=NEXT_STEP[result.outcome],
        warnings=[f"{w.code}: {w.detail}" for w in result.warnings],
    )


class FollowUpAnswer(StartAnswer):
    """start_follow_up's answer: start_operation's, for the new operation, with its link."""

    follows: str = Field(description="the operation it follows (the parent)")
    follow_up_kind: str


def _follow_up(
    backend: Backend,
    ctx: Context,
    operation_id: str,
    kind: str,
    command: dict[str, Any],
    instruction_id: str | None,
) -> FollowUpAnswer:
    principal = _principal(backend, ctx, TokenScope.submit)
    row = _owned(backend, principal, operation_id)
    try:
        answer = start_follow_up(
            row.operation_id,
            kind,
            command,
            principal.name,
            instruction_id=instruction_id,
            tenant=principal.tenant,
            runtime=backend.runtime(),
            door="mcp",
            caller=caller_of(principal),
        )
    except AmountLimitError as exc:
        raise ToolError(f"amount_limit_exceeded: {exc}") from None
    except FollowUpNotAllowedError as exc:
        raise ToolError(f"follow_up_not_allowed: {exc}") from None
    except RefusedInputError as exc:
        raise _refusal(exc) from None
    except LostRaceError:
        raise ToolError("conflict: the operation is busy; call again") from None
    result = answer.submitted
    return FollowUpAnswer(
        outcome=result.outcome.value,
        operation_id=result.operation_id,
        state=result.state,
        fingerprint=result.fingerprint,
        trace_id=result.trace_id,
        next_step=NEXT_STEP[result.outcome],
        warnings=[f"{w.code}: {w.detail}" for w in result.warnings],
        follows=answer.follows,
        follow_up_kind=answer.follow_up_kind,
    )


def _cancel(backend: Backend, ctx: Context, operation_id: str, reason: str) -> CancelAnswer:
    principal = _principal(backend, ctx, TokenScope.cancel)
    row = _owned(backend, principal, operation_id)
    if row.state in TERMINAL:
        raise ToolError(f"conflict: the operation has ended ({row.state.value})")
    try:
        state = interventions.request_cancel(
            str(row.operation_id), principal.author, reason, runtime=backend.runtime()
        )
    except LostRaceError:
        raise ToolError("conflict: the operation is busy; call again") from None
    except RefusedInputError as exc:
        raise ToolError(f"conflict: {exc}") from None
    return CancelAnswer(operation_id=str(row.operation_id), state=state)


def _escalations(
    backend: Backend, ctx: Context, limit: int, cursor: str | None
) -> EscalationsAnswer:
    principal = _principal(backend, ctx, TokenScope.read)
    try:
        after = decode_cursor(cursor) if cursor is not None else None
    except ProblemError:
        raise ToolError("invalid_request: cursor: not a cursor this server returned") from None
    with transaction(backend.database_url) as session:
        counts = query_store.escalation_counts(session, principal.tenant)
        page = query_store.escalations(session, principal.tenant, limit=limit, after=after)
    by_reason: dict[str, int] = {}
    by_state: dict[str, int] = {}
    for state, reason, count in counts:
        by_state[state] = by_state.get(state, 0) + count
        # As GET /v1/escalations: awaiting approval has no reason and counts under its state.
        by_reason[reason or state] = by_reason.get(reason or state, 0) + count
    return EscalationsAnswer(
        counts=EscalationCounts(
            total=sum(by_state.values()), by_reason=by_reason, by_state=by_state
        ),
        escalations=[
            WaitingOperation.model_validate(
                {
                    **r,
                    "links": operation_links(r["operation_id"]),
                    "waiting_since": r["updated_at"],
                }
            )
            for r in page.rows
        ],
        next_cursor=encode_cursor(page.next) if page.next is not None else None,
    )


OperationKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=255,
        description="Your key for this one intent, chosen once and reused on every retry of it",
    ),
]
OperationIdArg = Annotated[
    str, Field(max_length=100, description="the operation_id start_operation answered")
]


def build_server(settings: Settings, *, stdio_token: str | None = None) -> MCPServer:
    """The MCP server with its four tools; ``stdio_token`` is the stdio process's credential.

    The runtime (contracts, Redis, broker) is built on the first call that needs it.
    """
    built: list[Runtime] = []
    lock = threading.Lock()

    def runtime() -> Runtime:
        with lock:  # sync tools run on worker threads
            if not built:
                built.append(build_runtime(settings))
            return built[0]

    backend = Backend(database_url=settings.database_url, runtime=runtime, stdio_token=stdio_token)
    server: MCPServer = MCPServer("jobwarden", instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(
        description=(
            "Start an operation at a provider: jobwarden records it, creates the remote job "
            "once and drives it to a verified end. Answers outcome created, replayed, "
            "in_progress, conflict or duplicate_event, with the operation_id. " + RETRY_RULE
        ),
        annotations=ToolAnnotations(idempotent_hint=True, open_world_hint=True),
    )
    def start_operation(
        operation_key: OperationKey,
        provider: Annotated[str, Field(description="a provider contract's name")],
        command: Annotated[
            dict[str, Any], Field(description="the provider's command (its JSON Schema applies)")
        ],
        ctx: Context,
        source_event_id: Annotated[
            str | None,
            Field(description="a business identity that may have one operation only"),
        ] = None,
        bounds: Annotated[
            Bounds | None, Field(description="tighter limits than the contract's defaults")
        ] = None,
        concurrency_key: Annotated[
            str | None,
            Field(
                description="a target shared with other operations (e.g. "
                "deploy:payments:production): they run a limited number at a time, the rest "
                "wait in submission order (state queued)"
            ),
        ] = None,
        business_deadline: Annotated[
            str | float | None,
            Field(
                description="when the business stops wanting the work: an ISO 8601 time with "
                "its UTC offset, or seconds from now; automation stops with deadline_exceeded "
                "then (not part of the fingerprint)"
            ),
        ] = None,
        priority: Annotated[
            int | None,
            Field(
                description="-10 to 10, default 0: among your tenant's requests waiting for "
                "the provider's rate limit, a higher priority goes first (not part of the "
                "fingerprint)"
            ),
        ] = None,
    ) -> StartAnswer:
        return _start(
            backend,
            ctx,
            operation_key,
            provider,
            command,
            source_event_id,
            bounds,
            concurrency_key,
            business_deadline,
            priority,
        )

    @server.tool(
        description=(
            "One operation of your tenant: state, counters, deadlines, escalation and the "
            "options a human may pick, and the create request as it leaves (credential "
            "redacted), and once collected where the result is (result: location, sha256, "
            "size_bytes, content_type, validated true/false/'accepted', and the HTTP path "
            "that streams it). Safe to call as often as needed."
        ),
        annotations=ToolAnnotations(read_only_hint=True),
    )
    def get_operation(operation_id: OperationIdArg, ctx: Context) -> OperationView:
        principal = _principal(backend, ctx, TokenScope.read)
        row = _owned(backend, principal, operation_id)
        result = result_of(backend.database_url, row.operation_id)
        return http_operation_view(runtime(), row, result)

    @server.tool(
        description=(
            "The operation's signed receipt: its facts (ids, provider, token, fingerprint, "
            "create request as sent, approvals, observations, result digest, final state) and "
            "its whole event chain, signed with Ed25519. Anyone can verify it offline with "
            "`jobwarden receipt verify FILE --public-key K` (the key is served at "
            "/.well-known/jobwarden-receipt-key)."
        ),
        annotations=ToolAnnotations(read_only_hint=True),
    )
    def get_operation_receipt(operation_id: OperationIdArg, ctx: Context) -> dict[str, Any]:
        principal = _principal(backend, ctx, TokenScope.read)
        row = _owned(backend, principal, operation_id)
        return _receipt(settings, runtime(), row.operation_id)

    @server.tool(
        description=(
            "Start a follow-up of an operation its contract declares (a capture after a payment "
            "intent, a refund of a capture, a rollback of a deploy): a new operation with its "
            "own id and approval, linked to this one. A kind that may be many (a refund) needs "
            "an instruction_id of its own per instruction; the same instruction_id again is the "
            "same operation. Refused naming the parent's state, or what remains of an amount."
        ),
        annotations=ToolAnnotations(idempotent_hint=True, open_world_hint=True),
    )
    def start_follow_up_operation(
        operation_id: OperationIdArg,
        kind: Annotated[str, Field(max_length=40, description="capture, refund, rollback ...")],
        command: Annotated[dict[str, Any], Field(description="the follow-up contract's command")],
        ctx: Context,
        instruction_id: Annotated[
            str | None, Field(max_length=100, description="this instruction's own id")
        ] = None,
    ) -> FollowUpAnswer:
        return _follow_up(backend, ctx, operation_id, kind, command, instruction_id)

    @server.tool(
        description=(
            "Ask for an operation to be cancelled. The answer's state cancel_requested means "
            "we asked; only cancelled means the provider confirmed (follow with get_operation)."
        ),
        annotations=ToolAnnotations(destructive_hint=True, open_world_hint=True),
    )
    def cancel_operation(
        operation_id: OperationIdArg,
        reason: Annotated[Text, Field(description="why, for the history")],
        ctx: Context,
    ) -> CancelAnswer:
        return _cancel(backend, ctx, operation_id, reason)

    @server.tool(
        description=(
            "What waits for a human in your tenant (stopped operations and approvals), "
            "longest waiting first, a page at a time."
        ),
        annotations=ToolAnnotations(read_only_hint=True),
    )
    def list_escalations(
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
        cursor: Annotated[str | None, Field(min_length=1, max_length=200)] = None,
    ) -> EscalationsAnswer:
        return _escalations(backend, ctx, limit, cursor)

    # list_pauses (read), pause_operation and resume_pause (the pause scope).
    pause_tools.register(server, backend, principal_for=_principal, owned=_owned)
    return server


class BearerAuth:
    """ASGI middleware: every HTTP request needs a live API token (RFC 6750 section 2.1).

    A missing, malformed, unknown or revoked token is a 401 problem with
    ``WWW-Authenticate: Bearer`` (RFC 6750 section 3), answered before the MCP
    transport reads the body; a live token's principal rides in the scope's state.
    """

    def __init__(self, app: ASGIApp, database_url: str) -> None:
        self.app = app
        self.database_url = database_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan: the session manager's start
            return
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            await problem_response(401, "unauthenticated", "send Authorization: Bearer <token>")(
                scope, receive, send
            )
            return
        principal = None
        if token.startswith(TOKEN_PREFIX):
            principal = await anyio.to_thread.run_sync(principal_of, self.database_url, token)
        if principal is None:
            await problem_response(
                401,
                "unauthenticated",
                "the API token is unknown or revoked",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )(scope, receive, send)
            return
        state = {**(scope.get("state") or {}), PRINCIPAL_STATE: principal}
        await self.app({**scope, "state": state}, receive, send)


def http_app(settings: Settings, host: str) -> ASGIApp:
    """Streamable HTTP at /mcp behind BearerAuth.

    Stateless: each request stands alone with its own token, so no MCP session
    outlives the credential that opened it. ``host`` turns on the SDK's DNS-rebinding
    protection (allowed Host and Origin) for a loopback address.
    """
    server = build_server(settings)
    inner = server.streamable_http_app(stateless_http=True, host=host)
    return BearerAuth(inner, settings.database_url)


def stdio_token(settings: Settings, variable: str) -> str:
    """The live API token in ``variable``; SettingsError naming the variable otherwise.

    Checked before serving, so a misconfigured agent host sees one clear line on stderr
    instead of a server whose every call fails.
    """
    token = os.environ.get(variable, "").strip()
    if not token:
        raise SettingsError(
            f"{variable}: set it to an API token (jobwarden tokens create) for the stdio server"
        )
    if not token.startswith(TOKEN_PREFIX) or principal_of(settings.database_url, token) is None:
        raise SettingsError(f"{variable}: the API token is unknown or revoked")
    return token


def serve(
    settings: Settings,
    transport: str | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
    token_env: str | None = None,
) -> None:
    """Serve until stdin closes (stdio) or the process is stopped (http).

    Arguments left out take the mcp_* settings. Raises SettingsError naming the flag
    or variable for an unknown transport or a missing, unknown or revoked stdio token.
    """
    chosen = transport or settings.mcp_transport
    # Tracing when the OTEL_* variables ask for it: a tool call's submission is a span
    # under the traceparent in its _meta (jobwarden.observability.telemetry).
    telemetry.setup("jobwarden-mcp")
    if chosen == "stdio":
        token = stdio_token(settings, token_env or settings.mcp_token_env)
        # Before the SDK's own basicConfig: its lines go to stderr (stdout is the protocol),
        # structured like every other process's.
        logging.config.dictConfig(uvicorn_log_config("WARNING", settings.log_format))
        build_server(settings, stdio_token=token).run("stdio")
        return
    if chosen != "http":
        raise SettingsError(
            f"--transport / JOBWARDEN_MCP_TRANSPORT: {chosen!r} is not stdio or http"
        )
    bind = host or settings.mcp_host
    uvicorn.run(
        http_app(settings, bind),
        host=bind,
        port=settings.mcp_port if port is None else port,
        log_config=uvicorn_log_config(fmt=settings.log_format),
        # A request must arrive whole in time, as on the HTTP API (jobwarden/api/server.py).
        http=BoundedReadProtocol,
    )
