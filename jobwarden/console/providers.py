"""The console's providers page: each provider's state for the session's tenant (issue 39).

Running, or paused: by whom, since when, why, and how many of the tenant's operations
the pause parked; a provider breaker that opened shows since when, why and its evidence
(counts, first and last failing operations, sample answers), and ``operate`` may hold or
close it. Pause and resume buttons post with the session's CSRF token through
the one function every door calls (tasks/humans/pauses.py), as the session's principal:
the ``pause`` scope pauses the tenant's own share of a provider; a pause over every
tenant is shown (it holds the tenant's operations too) and resumed only with ``operate``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from jobwarden.api.auth import Scope
from jobwarden.api.context import runtime_of
from jobwarden.console.routes import ConsoleError, Form, Session, checked, page, router, see_other
from jobwarden.models.errors import LostRaceError, RefusedInputError
from jobwarden.models.humans.pauses import Pause
from jobwarden.models.persistence.breaker_store import Incident
from jobwarden.tasks.humans import breakers, pauses


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderState:
    name: str
    holds: tuple[Pause, ...]  # active pauses at it holding the tenant's operations
    breaker: Incident | None = None  # its breaker's open incident, with the evidence

    @property
    def state(self) -> str:
        return "paused" if self.holds else "running"


@router.get("/providers")
def providers(request: Request, current: Session) -> HTMLResponse:
    rt = runtime_of(request)
    active = pauses.pauses(tenant=current.principal.tenant, runtime=rt)
    incidents = breakers.open_incidents(runtime=rt)
    states = [
        ProviderState(
            name=name,
            holds=tuple(p for p in active if p.provider == name and p.operation_id is None),
            breaker=incidents.get(name),
        )
        for name in sorted(rt.contracts)
    ]
    return page(
        request,
        "providers.html",
        {
            "session": current,
            "providers": states,
            "may_pause": Scope.pause in current.principal.scopes,
            "may_operate": Scope.operate in current.principal.scopes,
        },
    )


@router.post("/providers/{provider}/pause")
def pause(request: Request, provider: str, current: Session, form: Form) -> Response:
    principal = checked(current, form, Scope.pause)
    rt = runtime_of(request)
    if provider not in rt.contracts:
        raise ConsoleError(404, f"no provider {provider!r}")
    reason = form.get("reason", "").strip()
    try:
        pauses.pause_provider(
            provider, reason, principal.author, tenant=principal.tenant, runtime=rt
        )
    except (RefusedInputError, LostRaceError) as exc:
        raise ConsoleError(422, str(exc)) from None
    return see_other("/console/providers?done=paused")


@router.post("/providers/{provider}/breaker/{action}")
def breaker_action(
    request: Request, provider: str, action: str, current: Session, form: Form
) -> Response:
    """Hold or close a provider's breaker: it holds every tenant's operations, so only with
    the ``operate`` scope, as the session's principal."""
    principal = checked(current, form, Scope.pause)
    if Scope.operate not in principal.scopes:
        raise ConsoleError(403, "a breaker holds every tenant's work: 'operate' scope needed")
    rt = runtime_of(request)
    if provider not in rt.contracts or action not in ("hold", "close"):
        raise ConsoleError(404, f"no breaker action {action!r} at {provider!r}")
    try:
        if action == "hold":
            breakers.hold(provider, principal.author, runtime=rt)
        else:
            breakers.close(provider, principal.author, form.get("note", ""), runtime=rt)
    except (RefusedInputError, LostRaceError) as exc:
        raise ConsoleError(409, str(exc)) from None
    return see_other(f"/console/providers?done=breaker_{action}")


@router.post("/pauses/{pause_id}/resume")
def resume(request: Request, pause_id: str, current: Session, form: Form) -> Response:
    principal = checked(current, form, Scope.pause)
    rt = runtime_of(request)
    try:
        found = pauses.find_pause(uuid.UUID(pause_id), runtime=rt)
    except ValueError:
        found = None
    if found is None or found.tenant not in (None, principal.tenant):
        raise ConsoleError(404, f"no pause {pause_id} for this tenant")
    if found.tenant is None and Scope.operate not in principal.scopes:
        raise ConsoleError(403, "a pause over every tenant is resumed with the 'operate' scope")
    try:
        pauses.resume(pause_id, principal.author, form.get("note", ""), runtime=rt)
    except (RefusedInputError, LostRaceError) as exc:
        raise ConsoleError(409, str(exc)) from None
    return see_other("/console/providers?done=resumed")
