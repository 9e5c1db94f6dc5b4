"""The CLI for scripts and people (issue 36, point 7): ``--json`` on every command that
prints a record or a list, tables with headers, ``none`` for an empty list, deadlines
that no longer apply shown as such, documented exit codes, and help without ``<bool>``."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

import pytest
import typer.main
from typer.testing import CliRunner

from jobwarden.cli.main import EXIT_CODES, SUBMIT_EXIT_CODES, app
from jobwarden.models.states import OperationState as S
from tests.integration.api_helpers import make_token, tenant_name
from tests.integration.test_cli import _cli
from tests.integration.test_store import NOW, _insert, _new_row


def _command_paths() -> list[list[str]]:
    """Every command and group of the app, as the words that reach it."""
    paths: list[list[str]] = [[]]
    root = typer.main.get_command(app)

    def walk(group: object, prefix: list[str]) -> None:
        for name, command in getattr(group, "commands", {}).items():
            paths.append([*prefix, name])
            walk(command, [*prefix, name])

    walk(root, [])
    return paths


def test_no_help_shows_a_python_type_after_an_option_or_argument() -> None:
    runner = CliRunner()
    # typer 0.28+'s annotations (<str>, <bool>, <list[str]> ...), after options and arguments.
    typed = re.compile(r"<(str|int|float|bool|Path|datetime|list\[\w+\])>")
    for path in _command_paths():
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, (path, shown.output)
        assert typed.search(shown.output) is None, (path, typed.search(shown.output))
    listed = runner.invoke(app, ["list", "--help"], env={"COLUMNS": "200"}).output
    assert re.search(r"--tenant\s+TEXT", listed) and re.search(r"--limit\s+INTEGER", listed)
    assert re.search(r"--json\s+\[env var", listed)  # a flag takes no value: nothing shown
    show_help = runner.invoke(app, ["show", "--help"], env={"COLUMNS": "200"}).output
    assert re.search(r"operation_id\s+TEXT", show_help)


def test_the_exit_codes_are_one_documented_table_the_help_prints() -> None:
    assert sorted(EXIT_CODES) == [0, 1, 2, 3, 4]
    assert set(SUBMIT_EXIT_CODES.values()) <= set(EXIT_CODES)
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert "Exit codes:" in shown
    for code, meaning in EXIT_CODES.items():
        assert f"{code}  {meaning[:30]}" in shown


def test_empty_lists_say_none_and_lists_have_headers(database_url: str) -> None:
    empty = tenant_name()
    for args in (("list", "--tenant", empty), ("schedules", "list", "--tenant", empty)):
        done = _cli(*args)
        assert (done.returncode, done.stdout) == (0, "none\n"), (args, done.stderr)
    op = _insert(database_url, _new_row(tenant=empty))
    listed = _cli("list", "--tenant", empty).stdout.splitlines()
    assert listed[0].split() == [
        "OPERATION",
        "CREATED",
        "(UTC)",
        "PROVIDER",
        "STATE",
        "REASON",
        "REMOTE",
        "JOB",
        "KEY",
    ]
    assert [ln.split()[0] for ln in listed[2:]] == [str(op)]
    running = _cli("options", str(op))
    assert (running.returncode, running.stdout) == (0, "none\n"), running.stderr
    assert json.loads(_cli("options", str(op), "--json").stdout) == []


def test_tokens_and_partitions_are_tables_with_headers_and_json(database_url: str) -> None:
    make_token(database_url, tenant_name(), "lister", ["read"])
    tokens = _cli("tokens", "list").stdout.splitlines()
    assert tokens[0].split() == [
        "ID",
        "NAME",
        "TENANT",
        "SCOPES",
        "CREATED",
        "LAST",
        "USED",
        "REVOKED",
    ]
    partitions = _cli("partitions")
    assert partitions.stdout.split()[:4] == ["PARTITION", "RANGE", "ROWS", "STATE"]
    listed = json.loads(_cli("partitions", "--json").stdout)
    assert listed and set(listed[0]) == {"partition", "range", "rows", "state"}


def test_show_history_and_verify_answer_json(database_url: str) -> None:
    op = _insert(database_url, _new_row(tenant=tenant_name()))
    shown = _cli("show", str(op), "--json")
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["operation_id"] == str(op) and record["state"] == "create_pending"
    assert record["status_requests"] == {"used": 0, "max": 10, "reserved": None}
    assert [d["name"] for d in record["deadlines"]] == ["create", "result"]
    assert record["command"] == {"a": 1} and record["options"] == []
    told = json.loads(_cli("history", str(op), "--json").stdout)
    assert [(e["seq"], e["kind"], e["actor"]) for e in told["events"]] == [
        (1, "intent_recorded", "tester")
    ]
    # Rows are made through intake's own path, so the intake log has its "created".
    assert [e["outcome"] for e in told["intake"]] == ["created"]
    verified = _cli("verify", str(op), "--json")
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout) == {
        "operation_id": str(op),
        "events": 1,
        "from_archive": False,
        "row_bound": True,
        "verified": True,
        "problems": [],
    }
    missing = _cli("verify", str(uuid.uuid4()), "--json")
    assert missing.returncode == 1 and json.loads(missing.stdout)["verified"] is False


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (S.awaiting_approval, "(not running until approved (5m from then))"),
        (S.succeeded, "(no longer applies: the operation is succeeded)"),
    ],
)
def test_show_says_when_a_past_deadline_does_not_apply(
    database_url: str, state: S, expected: str
) -> None:
    # Created long ago: both deadlines' instants are in the past.
    old = NOW - timedelta(days=30)
    op = _insert(
        database_url,
        _new_row(
            state,
            tenant=tenant_name(),
            created_at=old,
            create_deadline=old + timedelta(minutes=5),
            result_deadline=old + timedelta(minutes=5),
        ),
    )
    shown = _cli("show", str(op))
    assert shown.returncode == 0, shown.stderr
    (create,) = [ln for ln in shown.stdout.splitlines() if ln.startswith("create deadline")]
    assert create.endswith(expected) and "passed" not in create


def test_watch_json_prints_one_object_per_event_then_where_it_stopped(database_url: str) -> None:
    op = _insert(
        database_url,
        _new_row(S.escalated, tenant=tenant_name(), escalation_reason="request_budget_exhausted"),
    )
    watched = _cli("watch", str(op), "--json")
    assert watched.returncode == 1, watched.stderr
    lines = [json.loads(line) for line in watched.stdout.splitlines()]
    assert [line.get("kind") for line in lines[:-1]] == ["intent_recorded"]
    assert lines[-1] == {
        "stopped": "escalated",
        "escalation_reason": "request_budget_exhausted",
        "escalation_detail": None,
        "exit_code": 1,
    }
