"""The MCP door's pause tools (issue 39): read-only for an agent unless its token allows.

``list_pauses`` needs ``read`` (the pauses holding the tenant's operations);
``pause_operation`` and ``resume_pause`` need the ``pause`` scope, and act through the one
function every door calls (tasks/humans/pauses.py) as the token's principal. An agent
never pauses a provider for every tenant: that is an operator's (``operate``) decision,
taken at the CLI, the HTTP API or the console.

``show_breaker`` needs ``read``: a provider breaker's state and evidence. ``hold_breaker``
and ``close_breaker`` need the ``pause`` scope and, as at every other door, ``operate``
(a breaker holds every tenant's operations): an agent with only ``pause`` is refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from jobwarden.api.actions import Text
from jobwarden.api.auth import Principal
from jobwarden.api.auth import Scope as TokenScope
from jobwarden.models.errors import LostRaceError, RefusedInputError
from jobwarden.models.humans.pauses import Pause
from jobwarden.models.operation import Operation
from jobwarden.tasks.humans import breakers, pauses

PauseIdArg = Annotated[str, Field(min_length=1, max_length=64, description="the pause's id")]
ProviderArg = Annotated[str, Field(min_length=1, max_length=200, description="the provider")]


def shown(p: Pause) -> dict[str, Any]:
    return {
        "pause_id": str(p.pause_id),
        "scope": p.scope.value,
        "provider": p.provider,
        "tenant": p.tenant,
        "operation_id": str(p.operation_id) if p.operation_id else None,
        "reason": p.reason,
        "paused_by": p.author,
        "since": p.started_at.isoformat(),
        "resumed_by": p.resumed_by,
        "resumed_at": p.resumed_at.isoformat() if p.resumed_at else None,
    }


def register(
    server: MCPServer,
    backend: Any,
    *,
    principal_for: Callable[[Any, Context, TokenScope], Principal],
    owned: Callable[[Any, Principal, str], Operation],
) -> None:
    """Add the pause tools over the server's ``backend``, with its own checks: the caller's
    principal holding a scope (``principal_for``), and its tenant's operation (``owned``)."""
    _principal, _owned = principal_for, owned

    @server.tool(
        description=(
            "The pauses holding your tenant's operations (a provider's share, one operation, "
            "or a provider for every tenant), newest first: while one holds an operation "
            "nothing is sent for it."
        ),
        annotations=ToolAnnotations(read_only_hint=True),
    )
    def list_pauses(
        ctx: Context,
        include_resumed: Annotated[bool, Field(description="resumed pauses too")] = False,
    ) -> dict[str, Any]:
        principal = _principal(backend, ctx, TokenScope.read)
        found = pauses.pauses(
            active_only=not include_resumed, tenant=principal.tenant, runtime=backend.runtime()
        )
        return {"pauses": [shown(p) for p in found]}

    @server.tool(
        description=(
            "Pause one of your operations: it sends nothing (no poll, no cancel, no result "
            "fetch) until resume_pause; its deadlines keep running. Needs the pause scope."
        ),
        annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False),
    )
    def pause_operation(
        operation_id: Annotated[str, Field(min_length=1, max_length=64)],
        reason: Annotated[Text, Field(description="why, for the history")],
        ctx: Context,
    ) -> dict[str, Any]:
        principal = _principal(backend, ctx, TokenScope.pause)
        row = _owned(backend, principal, operation_id)
        try:
            done = pauses.pause_operation(
                str(row.operation_id),
                reason,
                principal.author,
                tenant=principal.tenant,
                runtime=backend.runtime(),
            )
        except (RefusedInputError, LostRaceError) as exc:
            raise ToolError(f"conflict: {exc}") from None
        return {**shown(done.pause), "started": done.started, "parked": done.parked}

    @server.tool(
        description=(
            "Resume a pause of your tenant's: what it held wakes spread by the provider's "
            "rate limit. Needs the pause scope; a pause over every tenant is an operator's."
        ),
        annotations=ToolAnnotations(destructive_hint=False, open_world_hint=True),
    )
    def resume_pause(
        pause_id: PauseIdArg,
        ctx: Context,
        note: Annotated[str, Field(max_length=2000)] = "",
    ) -> dict[str, Any]:
        principal = _principal(backend, ctx, TokenScope.pause)
        try:
            found = pauses.find_pause(uuid.UUID(pause_id), runtime=backend.runtime())
        except ValueError:
            found = None
        if found is None or found.tenant != principal.tenant:
            raise ToolError(f"not_found: pause_id {pause_id!r}: no such pause")
        try:
            done = pauses.resume(pause_id, principal.author, note, runtime=backend.runtime())
        except (RefusedInputError, LostRaceError) as exc:
            raise ToolError(f"conflict: {exc}") from None
        return {**shown(done.pause), "woken": done.woken}

    _breaker_tools(server, backend, principal_for=principal_for)


def _breaker_tools(
    server: MCPServer,
    backend: Any,
    *,
    principal_for: Callable[[Any, Context, TokenScope], Principal],
) -> None:
    def _operator(ctx: Context) -> Principal:
        principal = principal_for(backend, ctx, TokenScope.pause)
        if TokenScope.operate not in principal.scopes:
            raise ToolError("insufficient_scope: a breaker holds every tenant's work: operate")
        return principal

    def _decided(provider: str, decide: Callable[[Any], object]) -> dict[str, Any]:
        """An operator's hold or close, then the breaker as it is now."""
        rt = backend.runtime()
        try:
            decide(rt)
        except (RefusedInputError, LostRaceError) as exc:
            raise ToolError(f"conflict: {exc}") from None
        return breakers.shown(breakers.show(provider, runtime=rt))

    @server.tool(
        description=(
            "A provider's breaker: closed, or open (or probing, or held) since when, why, "
            "and the evidence it saw (counts, first and last failing operations, samples)."
        ),
        annotations=ToolAnnotations(read_only_hint=True),
    )
    def show_breaker(provider: ProviderArg, ctx: Context) -> dict[str, Any]:
        principal_for(backend, ctx, TokenScope.read)
        try:
            return breakers.shown(breakers.show(provider, runtime=backend.runtime()))
        except RefusedInputError as exc:
            raise ToolError(f"not_found: {exc}") from None

    @server.tool(
        description=(
            "Hold a provider's open breaker: no half-open probe until it is closed. Needs the "
            "pause and operate scopes."
        ),
        annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False),
    )
    def hold_breaker(provider: ProviderArg, ctx: Context) -> dict[str, Any]:
        principal = _operator(ctx)
        return _decided(provider, lambda rt: breakers.hold(provider, principal.author, runtime=rt))

    @server.tool(
        description=(
            "Close a provider's breaker: its pause ends and what it held wakes spread by the "
            "provider's rate limit. Needs the pause and operate scopes."
        ),
        annotations=ToolAnnotations(destructive_hint=False, open_world_hint=True),
    )
    def close_breaker(
        provider: ProviderArg,
        ctx: Context,
        note: Annotated[str, Field(max_length=2000)] = "",
    ) -> dict[str, Any]:
        principal = _operator(ctx)
        return _decided(
            provider, lambda rt: breakers.close(provider, principal.author, note, runtime=rt)
        )
