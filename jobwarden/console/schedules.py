"""The console's schedules page: the session's tenant's schedules, read-only.

Next slot, last slot with its operation and state, and missed slots, as
`jobwarden schedules list` and GET /v1/schedules show them; pausing, triggering and
backfilling stay with the CLI and the HTTP API (they need the submit scope).
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse

from jobwarden.api.context import settings_of
from jobwarden.console.routes import Session, page, router
from jobwarden.models.persistence import schedule_store
from jobwarden.models.persistence.db import snapshot


@router.get("/schedules")
def schedules(request: Request, current: Session) -> HTMLResponse:
    with snapshot(settings_of(request).database_url) as session:
        views = schedule_store.views(session, tenant=current.principal.tenant)
    return page(request, "schedules.html", {"session": current, "schedules": views})
