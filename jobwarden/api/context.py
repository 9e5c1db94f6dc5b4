"""What a request handler needs from the app: its settings and its runtime.

create_app stores both on ``app.state``; handlers reach them through the request,
so two apps with different settings (tests) never share a database.
"""

from __future__ import annotations

from fastapi import Request

from jobwarden.config.settings import Settings
from jobwarden.tasks.runtime import Runtime


def settings_of(request: Request) -> Settings:
    settings = request.app.state.settings
    assert isinstance(settings, Settings)
    return settings


def runtime_of(request: Request) -> Runtime:
    """The app's runtime (contracts, Redis, broker), built on first use in this process."""
    provider = request.app.state.runtime
    runtime = provider()
    assert isinstance(runtime, Runtime)
    return runtime
