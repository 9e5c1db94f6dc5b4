"""The curated public API of ``jobwarden``: exactly these names, each the named object,
loaded lazily so that ``import jobwarden`` alone stays cheap."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import jobwarden

INIT = Path(jobwarden.__file__)

# The promise to callers: public name -> (module, attribute). Changing it is an API change.
PUBLIC = {
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
HEAVY = ("celery", "sqlalchemy", "redis", "httpx")


def _fresh(code: str) -> str:
    """Run ``code`` in a fresh interpreter outside the repository; return its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tempfile.gettempdir(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_all_lists_exactly_the_public_names() -> None:
    assert jobwarden.__all__ == [
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
    assert set(jobwarden.__all__) == set(PUBLIC)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_public_name_is_the_object_it_names(name: str) -> None:
    module, attribute = PUBLIC[name]
    assert getattr(jobwarden, name) is getattr(importlib.import_module(module), attribute)


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from jobwarden import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(PUBLIC)


def test_an_unknown_name_raises_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'no_such_thing'"):
        _ = jobwarden.no_such_thing  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="no_such_thing"):
        exec("from jobwarden import no_such_thing", {})


def test_dir_shows_the_public_names_and_the_version_but_not_the_helpers() -> None:
    listed = dir(jobwarden)
    assert set(PUBLIC) | {"__version__", "__all__"} <= set(listed)
    assert not {"_EXPORTS", "_load", "importlib", "TYPE_CHECKING"} & set(listed)


def test_version_comes_from_the_installed_metadata() -> None:
    assert jobwarden.__version__ == importlib.metadata.version("jobwarden")


def test_type_checkers_see_the_same_names_the_package_serves() -> None:
    # The TYPE_CHECKING imports are a second copy of the table, for mypy; they must not drift.
    seen: dict[str, tuple[str, str]] = {}
    for node in ast.walk(ast.parse(INIT.read_text(encoding="utf-8"))):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module:
                    for alias in stmt.names:
                        seen[alias.asname or alias.name] = (stmt.module, alias.name)
    assert seen == PUBLIC


def test_importing_the_package_alone_loads_no_driver_and_no_submodule() -> None:
    lines = [
        "import json, sys",
        "import jobwarden",
        f"heavy = {HEAVY!r}",
        "print(json.dumps(sorted(m for m in sys.modules",
        "    if m.split('.')[0] in heavy or m.startswith('jobwarden.'))))",
    ]
    loaded = json.loads(_fresh("\n".join(lines)))
    assert loaded == []


@pytest.mark.parametrize("name", ["submit", "cancel", "OptionKind", "GiveUpError"])
def test_a_public_name_imports_first_thing_in_a_fresh_interpreter(name: str) -> None:
    # Each name's module is the first jobwarden code that runs: an import cycle shows up here.
    module, attribute = PUBLIC[name]
    lines = [
        f"from jobwarden import {name}",
        f"import {module}",
        f"print({name} is {module}.{attribute})",
    ]
    out = _fresh("\n".join(lines))
    assert out.strip() == "True"
