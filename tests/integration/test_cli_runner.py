"""The in-process `jobwarden` (tests/cli_runner.py) answers what the real process answers.

Most CLI tests run the command inside the test process to save a process start each; these
run the same command lines both ways and compare exit code, stdout and stderr byte for
byte: the environment given, settings read afresh, a usage error's panel, a warning logged
with no handler, and the test process's own state left as it was.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest

from jobwarden.config.settings import get_settings
from jobwarden.models.states import OperationState as S
from jobwarden.tasks import runtime
from tests.cli_runner import REPO, CliResult, run_cli, run_cli_process
from tests.integration.test_store import _insert, _new_row


def _same(*args: str, env: dict[str, str | None] | None = None) -> CliResult:
    inside, real = run_cli(*args, env=env), run_cli_process(*args, env=env)
    assert (inside.returncode, inside.stdout, _timeless(inside.stderr)) == (
        real.returncode,
        real.stdout,
        _timeless(real.stderr),
    ), args
    return inside


def _timeless(text: str) -> str:
    """``text`` with each log line's timestamp blanked (the two runs are moments apart)."""
    return re.sub(r'"timestamp": "[^"]+"', '"timestamp": "-"', text)


@pytest.fixture(scope="module")
def broken_providers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("broken-providers")
    text = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    (folder / "sandbox.toml").write_text(text)
    (folder / "typo.toml").write_text(
        text.replace('name = "sandbox"', 'name = "typo"').replace("max_seconds = 5", "x = 1")
    )
    return folder


# Each command line with the exit code it ends with.
COMMAND_LINES = {
    "a check that finds a problem": (("providers", "check", "--no-running"), 1),
    "a refused argument": (("verify", "not-a-uuid"), 2),
    "a usage error's panel": (("verify", "--no-such-flag"), 2),
    "the help": (("schedules", "--help"), 0),
    "the version": (("--version",), 0),
}


@pytest.mark.parametrize(("args", "code"), COMMAND_LINES.values(), ids=COMMAND_LINES.keys())
def test_a_command_line_answers_the_same_in_this_process_and_in_its_own(
    args: tuple[str, ...], code: int, broken_providers: Path
) -> None:
    done = _same(*args, env={"JOBWARDEN_PROVIDERS_DIR": str(broken_providers)})
    assert done.returncode == code, done.stderr


def test_an_invalid_setting_is_read_afresh_and_named_the_same_way() -> None:
    assert get_settings().lease_ttl_seconds  # this process's settings, cached and valid
    done = _same("providers", "schema", env={"JOBWARDEN_LEASE_TTL_SECONDS": "soon"})
    assert done.returncode == 2 and "JOBWARDEN_LEASE_TTL_SECONDS" in done.stderr


def test_a_break_glass_decision_warns_and_logs_on_stderr_the_same_way(database_url: str) -> None:
    op = _insert(
        database_url,
        _new_row(
            state=S.escalated,
            escalation_reason="request_budget_exhausted",
            remote_job_id="job_1",
            status_url="http://127.0.0.1:9/v1/jobs/job_1",
        ),
    )
    shown = _same("show", str(op))
    assert shown.returncode == 0 and str(op) in shown.stdout
    refused = _same("decide", str(op), "resume", "--break-glass", "ops are on it")
    assert refused.returncode == 2 and "WARNING: break-glass" in refused.stderr


def test_the_test_process_keeps_its_settings_runtime_and_environment(database_url: str) -> None:
    mine, own_runtime = get_settings(), runtime.current()
    environ, cwd = dict(os.environ), os.getcwd()
    other = f"jwtest-other-{uuid.uuid4().hex[:6]}"
    done = run_cli("providers", "check", "--no-running", env={"JOBWARDEN_KEY_PREFIX": other})
    assert done.returncode == 0, done.stderr
    assert dict(os.environ) == environ and os.getcwd() == cwd
    assert runtime.current() is own_runtime
    assert get_settings() == mine and get_settings().key_prefix != other
