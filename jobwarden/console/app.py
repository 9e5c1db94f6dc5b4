"""The HTTP process's app: the API with the operators' console under /console.

What ``jobwarden serve`` runs (a uvicorn factory). Composed here, in the console, so the
arrow points one way: the console imports the API (its tokens, problems and routes'
context); the API never imports the console and stays whole on its own.
"""

from __future__ import annotations

from fastapi import FastAPI

from jobwarden.api.app import create_app as create_api
from jobwarden.config.settings import Settings, get_settings
from jobwarden.console import install


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API for ``settings`` (default: the process's JOBWARDEN_* settings) with the
    console installed: same tokens, held in a session cookie."""
    resolved = settings or get_settings()
    app = create_api(resolved)
    install(app, resolved)
    return app
