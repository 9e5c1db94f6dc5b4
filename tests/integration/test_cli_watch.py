"""`jobwarden watch`, `list`, and what `show` and `history` tell an operator, run as
operators run them: in this process (tests/cli_runner.py), and a real process under a
pseudo-terminal for the live view."""

from __future__ import annotations

import json
import os
import sys
import uuid
from datetime import timedelta
from typing import Unpack

import pexpect

from jobwarden.demo.harness import REPO
from jobwarden.models.actions import EscalationReason
from jobwarden.models.history.chain import EventDraft, EventKind
from jobwarden.models.operation import RowChanges
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from tests.cli_runner import CliResult, run_cli
from tests.integration.api_helpers import NOW, insert_operation, load, tenant_name

# A credential the sandbox contract reads (secret_env): `show` must never print it.
CREDENTIAL = "sk-watch-credential-0123456789"


def _cli(*args: str) -> CliResult:
    """``jobwarden ARGS`` in this process (tests/cli_runner.py), with the sandbox's token."""
    return run_cli(*args, env={"JOBWARDEN_SANDBOX_TOKEN": CREDENTIAL})


def _advance(
    url: str, op_id: uuid.UUID, *drafts: EventDraft, **changes: Unpack[RowChanges]
) -> None:
    """Write the row as a worker would: fenced by version, with the events that explain it."""
    with transaction(url) as session:
        row = store.load(session, op_id)
        assert row is not None
        store.fenced_update(session, row, changes=changes, drafts=drafts, now=NOW)


def _polled(request: int, progress: int) -> EventDraft:
    return EventDraft(
        kind=EventKind.polled,
        actor="worker-7",
        at=NOW,
        http_status=200,
        excerpt={"request": request, "of": 10, "remote_state": "running", "progress": progress},
    )


def test_watch_shows_progress_and_the_story_live_and_ends_at_the_stop(database_url: str) -> None:
    op = insert_operation(database_url, tenant_name(), S.observing, progress=10.0)
    child = pexpect.spawn(
        sys.executable,
        ["-m", "jobwarden.cli.main", "watch", str(op), "--interval", "0.2"],
        cwd=str(REPO),
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"},
        dimensions=(40, 120),
        encoding="utf-8",
        timeout=20,
    )
    try:
        child.expect("10%")
        child.expect("observing")
        _advance(
            database_url,
            op,
            _polled(1, 40),
            status_requests_used=1,
            progress=40.0,
        )
        child.expect("40%")
        child.expect(r"status request 1/10: polled, 200, running 40%")
        _advance(
            database_url,
            op,
            EventDraft(
                kind=EventKind.observed,
                actor="worker-7",
                at=NOW,
                from_state=S.observing.value,
                to_state=S.result_collecting.value,
                http_status=200,
                excerpt={"request": 2, "of": 10, "remote_state": "succeeded", "progress": 100},
            ),
            EventDraft(
                kind=EventKind.result_collected,
                actor="worker-7",
                at=NOW,
                from_state=S.result_collecting.value,
                to_state=S.succeeded.value,
            ),
            state=S.succeeded,
            status_requests_used=2,
            progress=100.0,
        )
        child.expect("100%")
        child.expect("stopped: succeeded")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_watch_of_a_stopped_operation_outside_a_terminal_prints_the_story_and_exits_1(
    database_url: str,
) -> None:
    op = insert_operation(
        database_url,
        tenant_name(),
        S.escalated,
        escalation_reason="rate_limited",
        escalation_detail="5 consecutive 429 answers",
    )
    done = _cli("watch", str(op), "--interval", "0.2")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert "intent recorded -> escalated" in lines[0]
    assert lines[-1] == "stopped: escalated (rate_limited: 5 consecutive 429 answers)"


def test_watch_refuses_a_bad_id_in_one_line() -> None:
    done = _cli("watch", "nope")
    assert done.returncode == 2
    assert done.stderr.strip() == "not an operation id: 'nope'"


def test_show_prints_the_fingerprint_and_the_command_with_secrets_redacted(
    database_url: str,
) -> None:
    command = {"kind": "export", "api_key": "hidden-by-name", "note": f"token {CREDENTIAL}"}
    op = insert_operation(database_url, tenant_name(), S.awaiting_approval, command=command)
    row = load(database_url, op)
    shown = _cli("show", str(op))
    assert shown.returncode == 0, shown.stderr
    assert f"fingerprint      {row.request_fingerprint}" in shown.stdout.splitlines()
    (line,) = [ln for ln in shown.stdout.splitlines() if ln.startswith("command ")]
    assert json.loads(line.split(None, 1)[1]) == {
        "api_key": "[redacted]",
        "kind": "export",
        "note": "token [redacted]",
    }
    assert CREDENTIAL not in shown.stdout and "hidden-by-name" not in shown.stdout
    # The create as it leaves: the provider's route, every header, the body as sent.
    lines = shown.stdout.splitlines()
    assert "request          POST http://127.0.0.1:8765/v1/jobs" in lines
    assert "  header         Authorization: Bearer [redacted]" in lines
    assert f"  header         Idempotency-Key: {row.provider_token}" in lines
    (body,) = [ln for ln in lines if ln.startswith("  body ")]
    assert json.loads(body.split(None, 1)[1]) == {
        "kind": "export",
        "api_key": "[redacted]",
        "note": "token [redacted]",
    }


def test_history_prints_the_date_and_the_actor_of_every_event(database_url: str) -> None:
    op = insert_operation(database_url, tenant_name(), S.observing)
    _advance(database_url, op, _polled(1, 20), status_requests_used=1)
    told = _cli("history", str(op))
    assert told.returncode == 0, told.stderr
    day = NOW.strftime("%Y-%m-%d %H:%M:%S")
    events = [ln for ln in told.stdout.splitlines() if ln.startswith(day)]
    assert len(events) == 2
    assert events[0].split()[2:4] == ["submitter:submitter", "intent"]
    assert events[1].split()[2:4] == ["worker-7", "status"]


def test_list_filters_like_the_http_api_and_pages_with_a_cursor(database_url: str) -> None:
    tenant = tenant_name()
    first = insert_operation(database_url, tenant, S.escalated, escalation_reason="rate_limited")
    second = insert_operation(
        database_url,
        tenant,
        S.escalated,
        escalation_reason="rate_limited",
        created_at=NOW + timedelta(seconds=1),
    )
    insert_operation(database_url, tenant, S.observing)
    insert_operation(database_url, tenant_name(), S.escalated, escalation_reason="rate_limited")
    page = _cli("list", "--tenant", tenant, "--reason", "rate_limited", "--limit", "1")
    assert page.returncode == 0, page.stderr
    # A table: its header and rule, then one row per operation.
    assert [ln.split()[0] for ln in page.stdout.splitlines()[2:]] == [str(first)]
    cursor = page.stderr.strip().removeprefix("more: --cursor ")
    rest = _cli("list", "--tenant", tenant, "--reason", "rate_limited", "--cursor", cursor)
    assert [ln.split()[0] for ln in rest.stdout.splitlines()[2:]] == [str(second)]
    assert rest.stderr == ""
    as_json = _cli("list", "--tenant", tenant, "--state", "observing", "--json")
    body = json.loads(as_json.stdout)
    assert [r["state"] for r in body["operations"]] == ["observing"]
    assert body["next_cursor"] is None


def test_list_names_a_bad_filter_in_one_line() -> None:
    done = _cli("list", "--state", "sleeping")
    assert done.returncode == 2
    assert done.stderr.startswith("error: --state/--reason:") and "sleeping" in done.stderr


def test_watch_reads_postgres_at_most_every_fifth_of_a_second_and_stops_at_the_stop(
    database_url: str,
) -> None:
    from jobwarden.cli.watch import MIN_WATCH_INTERVAL, follow

    op = insert_operation(database_url, tenant_name(), S.observing, progress=10.0)
    slept: list[float] = []
    seen: list[int] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:  # the operation stops while the watcher waits
            _advance(
                database_url,
                op,
                EventDraft(
                    kind=EventKind.escalated,
                    actor="worker-7",
                    at=NOW,
                    from_state=S.observing.value,
                    to_state=S.escalated.value,
                    cause="rate_limited",
                ),
                state=S.escalated,
                escalation_reason=EscalationReason.rate_limited,
            )

    last = follow(
        database_url,
        op,
        interval=0.0,
        on_change=lambda row, story, new: seen.append(len(story)),
        sleep=sleep,
    )
    assert last.state is S.escalated
    assert slept == [MIN_WATCH_INTERVAL] * 3  # asked for no pause, read at the bounded rate
    assert seen == [1, 2]  # drawn once at the start, once when the stop arrived
