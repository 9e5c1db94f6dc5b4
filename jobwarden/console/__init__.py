"""The operators' console: server-rendered pages in the API process, under /console.

``install(app)`` adds its routes, its static files (one small script, no build
step, no CDN) and the handlers that turn a missing session into a redirect to
the login page and a refusal into a page naming what was wrong. ``app`` composes the
HTTP process: the API with the console installed. May import: ``jobwarden.api``,
``jobwarden.models``, ``jobwarden.tasks``, ``jobwarden.config`` and
``jobwarden.observability``.
"""

from __future__ import annotations

import secrets

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from jobwarden.config.settings import Settings

# Imported for their routes: search.py adds /console/search and /console/bulk to the
# router, schedules.py /console/schedules, providers.py /console/providers (and pauses).
from jobwarden.console import providers, schedules, search  # noqa: F401
from jobwarden.console.routes import HERE, ConsoleError, page, router
from jobwarden.console.session import LoginRequiredError


def install(app: FastAPI, settings: Settings) -> None:
    configured = settings.console_session_secret
    # Drawn here, once per app, not per request: two threads must not sign with two keys.
    app.state.console_key = (
        configured.get_secret_value() if configured else secrets.token_urlsafe(32)
    )
    app.include_router(router)
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")

    async def login_required(request: Request, exc: Exception) -> Response:
        return RedirectResponse("/console/login", status_code=303)

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ConsoleError)
        return page(request, "error.html", {"error": exc}, status=exc.status, headers=exc.headers)

    app.add_exception_handler(LoginRequiredError, login_required)
    app.add_exception_handler(ConsoleError, refused)
