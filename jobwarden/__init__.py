"""jobwarden: drive long-running jobs at external HTTP APIs, exactly once.

The public API is the names in ``__all__``: submit an operation, cancel,
approve, list and decide a stopped operation's options, the answer types, and
the error tree grouped by what the caller must do. Everything else is an
implementation module and may change.

The names load on first use (PEP 562): ``import jobwarden`` alone pulls in
neither Celery, SQLAlchemy, Redis nor httpx, so the CLI starts fast, and the
package itself imports no submodule, so no submodule's import can cycle
through it. An unknown name raises AttributeError naming it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # For type checkers only; at run time __getattr__ serves the same names from _EXPORTS.
    from jobwarden.models.errors import (
        GiveUpError,
        InvalidSubmissionError,
        JobwardenError,
        LostRaceError,
        RefusedInputError,
        RetryLaterError,
        StaleVersionError,
    )
    from jobwarden.models.humans.escalation import Option, OptionKind
    from jobwarden.tasks.follow_ups import FollowUpResult
    from jobwarden.tasks.follow_ups import start_follow_up as follow_up
    from jobwarden.tasks.humans.interventions import Decision, approve
    from jobwarden.tasks.humans.interventions import decide_escalation as decide
    from jobwarden.tasks.humans.interventions import escalation_options as options
    from jobwarden.tasks.humans.interventions import request_cancel as cancel
    from jobwarden.tasks.intake import SubmitOutcome, SubmitResult
    from jobwarden.tasks.intake import submit_operation as submit

    __version__: str

__all__ = [
    "Decision",
    "FollowUpResult",
    "GiveUpError",
    "InvalidSubmissionError",
    "JobwardenError",
    "LostRaceError",
    "Option",
    "OptionKind",
    "RefusedInputError",
    "RetryLaterError",
    "StaleVersionError",
    "SubmitOutcome",
    "SubmitResult",
    "approve",
    "cancel",
    "decide",
    "follow_up",
    "options",
    "submit",
]

# Public name -> (module, attribute). Module paths are strings so that importing the
# package stays cheap and the package never appears in a static import cycle.
_EXPORTS: dict[str, tuple[str, str]] = {
    "submit": ("jobwarden.tasks.intake", "submit_operation"),
    "SubmitResult": ("jobwarden.tasks.intake", "SubmitResult"),
    "SubmitOutcome": ("jobwarden.tasks.intake", "SubmitOutcome"),
    "cancel": ("jobwarden.tasks.humans.interventions", "request_cancel"),
    "approve": ("jobwarden.tasks.humans.interventions", "approve"),
    "decide": ("jobwarden.tasks.humans.interventions", "decide_escalation"),
    "options": ("jobwarden.tasks.humans.interventions", "escalation_options"),
    "Decision": ("jobwarden.tasks.humans.interventions", "Decision"),
    "follow_up": ("jobwarden.tasks.follow_ups", "start_follow_up"),
    "FollowUpResult": ("jobwarden.tasks.follow_ups", "FollowUpResult"),
    "Option": ("jobwarden.models.humans.escalation", "Option"),
    "OptionKind": ("jobwarden.models.humans.escalation", "OptionKind"),
    "JobwardenError": ("jobwarden.models.errors", "JobwardenError"),
    "RefusedInputError": ("jobwarden.models.errors", "RefusedInputError"),
    "InvalidSubmissionError": ("jobwarden.models.errors", "InvalidSubmissionError"),
    "LostRaceError": ("jobwarden.models.errors", "LostRaceError"),
    "StaleVersionError": ("jobwarden.models.errors", "StaleVersionError"),
    "RetryLaterError": ("jobwarden.models.errors", "RetryLaterError"),
    "GiveUpError": ("jobwarden.models.errors", "GiveUpError"),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jobwarden")
    except PackageNotFoundError:
        # A source tree on sys.path without an install has no metadata to read.
        return "0+unknown"


def _load(name: str) -> Any:
    """Import and cache one public name; the module's ``__getattr__``."""
    if name == "__version__":
        value: Any = _version()
    elif name in _EXPORTS:
        module, attribute = _EXPORTS[name]
        value = getattr(importlib.import_module(module), attribute)
    else:
        raise AttributeError(f"module 'jobwarden' has no attribute {name!r}")
    # Cache it: later lookups are plain module attributes and skip this hook.
    globals()[name] = value
    return value


if not TYPE_CHECKING:
    # Hidden from type checkers, so that they report a misspelt name instead of typing it Any.
    __getattr__ = _load


def __dir__() -> list[str]:
    # The public surface plus the module's dunders; helpers and cached submodules stay out.
    dunders = {name for name in globals() if name.startswith("__")}
    return sorted({*__all__, "__version__", *dunders})
