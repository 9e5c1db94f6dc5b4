"""The `jobwarden` command as operators run it, with the environment.

Most tests run the command in this process (tests/cli_runner.py: the same main(), the
environment the process would have had); the ones about the process itself (settings read
at startup, the entry point) start it for real.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

from sqlalchemy import select

from jobwarden.models.contracts.loader import contract_json_schema
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import OperationRow
from tests.cli_runner import REPO, CliResult, run_cli, run_cli_process
from tests.integration.test_store import _insert, _new_row


def _cli(*args: str, env: dict[str, str] | None = None) -> CliResult:
    """``jobwarden ARGS`` in this process (tests/cli_runner.py), with ``env`` on top."""
    return run_cli(*args, env=env)


def test_providers_check_accepts_the_four_shipped_contracts() -> None:
    # A real process: the entry point `python -m jobwarden.cli.main` itself.
    done = run_cli_process("providers", "check", "--dir", str(REPO / "config" / "providers"))
    assert done.returncode == 0, done.stderr
    for name in ("sandbox", "azure_lro", "google_aip151", "openai_batch"):
        assert f"ok      {name}" in done.stdout


def test_providers_check_rejects_a_broken_contract_naming_file_and_field(tmp_path: Path) -> None:
    shutil.copy(REPO / "config" / "providers" / "sandbox.toml", tmp_path / "sandbox.toml")
    broken = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    broken = broken.replace('name = "sandbox"', 'name = "typo"').replace(
        "jitter_floor = 0.5", "jitter_floor = 1.5"
    )
    (tmp_path / "typo.toml").write_text(broken)
    done = _cli("providers", "check", env={"JOBWARDEN_PROVIDERS_DIR": str(tmp_path)})
    assert done.returncode == 1
    assert "ok      sandbox" in done.stdout
    assert "typo.toml" in done.stderr and "poll.jitter_floor" in done.stderr


def test_providers_schema_prints_the_contracts_json_schema() -> None:
    done = _cli("providers", "schema")
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    assert schema == contract_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "create" in schema["properties"] and schema["additionalProperties"] is False


def test_a_bad_field_is_one_error_line_naming_file_and_field(tmp_path: Path) -> None:
    text = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    (tmp_path / "sandbox.toml").write_text(text.replace("max_seconds = 5", 'max_seconds = "5"'))
    done = _cli("providers", "check", "--dir", str(tmp_path))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"invalid {tmp_path / 'sandbox.toml'}: poll.max_seconds: "
        "must be a number, got a string ('5')"
    ]


def test_show_history_and_verify_tell_an_operations_story(database_url: str) -> None:
    op = _insert(database_url, _new_row())
    # A real process for the operation commands: the runtime and engines a process builds.
    shown = run_cli_process("show", str(op))
    assert shown.returncode == 0, shown.stderr
    assert "create_pending" in shown.stdout and "0/10" in shown.stdout
    told = _cli("history", str(op))
    assert "intent recorded -> create_pending" in told.stdout
    verified = _cli("verify", str(op))
    assert verified.returncode == 0 and "chain verified: 1 events" in verified.stdout


def test_an_invalid_setting_is_one_clear_error_naming_the_variable() -> None:
    # A real process: settings are read once at startup, before any command.
    done = run_cli_process("providers", "check", env={"JOBWARDEN_LEASE_TTL_SECONDS": "soon"})
    assert done.returncode != 0
    assert "JOBWARDEN_LEASE_TTL_SECONDS" in done.stderr
    assert "Traceback" not in done.stderr


def test_show_lists_the_options_a_human_may_pick_for_a_stopped_operation(
    database_url: str,
) -> None:
    from jobwarden.models.states import OperationState as S

    op = _insert(
        database_url,
        _new_row(
            state=S.escalated,
            escalation_reason="request_budget_exhausted",
            remote_job_id="job_1",
            status_url="http://127.0.0.1:9/v1/jobs/job_1",
        ),
    )
    shown = _cli("show", str(op))
    assert shown.returncode == 0, shown.stderr
    options = [
        ln.split()[1].rstrip(":") for ln in shown.stdout.splitlines() if ln.startswith("option")
    ]
    assert options == ["extend", "cancel_at_provider", "abandon"]
    refused = _cli("decide", str(op), "resume", "--break-glass", "ops are on it")
    assert refused.returncode == 2 and "not offered" in refused.stderr


def test_verify_names_an_argument_that_is_not_an_operation_id_in_one_line() -> None:
    done = _cli("verify", "not-a-uuid")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["not an operation id: 'not-a-uuid'"]
    assert done.stdout == ""


def test_verify_of_a_missing_operation_is_one_line_and_exit_1(database_url: str) -> None:
    missing = uuid.uuid4()
    done = _cli("verify", str(missing))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"no operation {missing}"]


def test_show_and_history_refuse_a_bad_id_in_one_line_too() -> None:
    for command in ("show", "history"):
        done = _cli(command, "12\n34")
        assert done.returncode == 2
        assert done.stderr.splitlines() == ["not an operation id: '12\\n34'"]


def test_verify_takes_exactly_one_of_an_id_export_heads_or_heads(tmp_path: Path) -> None:
    for args in ((), ("--export-heads", str(uuid.uuid4())), ("--export-heads", "--heads", "f")):
        done = _cli("verify", *args)
        assert done.returncode == 2, args
        assert done.stderr.splitlines() == [
            "verify takes one of: an operation id, --export-heads, --heads FILE"
        ]


def test_an_odd_remote_job_id_is_stored_as_sent_and_shown_escaped_on_one_line(
    database_url: str,
) -> None:
    odd = "job\n1\x1b[31m"
    op = _insert(database_url, _new_row(remote_job_id=odd, status_url="http://127.0.0.1:9/j"))
    shown = _cli("show", str(op))
    assert shown.returncode == 0, shown.stderr
    assert "remote job       job\\n1\\x1b[31m" in shown.stdout.splitlines()
    with transaction(database_url) as session:
        assert (
            session.scalar(
                select(OperationRow.remote_job_id).where(OperationRow.operation_id == op)
            )
            == odd
        )
