"""Schedules through their doors: `jobwarden schedules` as operators run it (in this
process, tests/cli_runner.py; one real process), /v1/schedules with the API's tokens and
scopes, and the figures on /metrics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, select

from jobwarden.models.persistence import schedule_store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.schedule_tables import ScheduleActionRow, ScheduleRow
from jobwarden.models.schedules.slots import ScheduleStatus, parse_spec
from jobwarden.observability.metrics import collect_families
from jobwarden.tasks.runtime import current
from jobwarden.tasks.schedules import tick_once
from tests.api_server import serving
from tests.cli_runner import CliResult, run_cli, run_cli_process
from tests.integration.api_helpers import make_token, tenant_name

TYPE = "tag:jobwarden.dev,2026:problem/"


@pytest.fixture
def tenant(database_url: str) -> Iterator[str]:
    name = tenant_name()
    yield name
    with transaction(database_url) as session:
        session.execute(delete(ScheduleRow).where(ScheduleRow.tenant == name))


def _cli(*args: str, env: dict[str, str] | None = None) -> CliResult:
    """``jobwarden ARGS`` in this process (tests/cli_runner.py), with ``env`` on top."""
    return run_cli(*args, env=env)


def _token_env(database_url: str, tenant: str, name: str) -> dict[str, str]:
    """The environment of a CLI acting with a new token of ``tenant`` named ``name``."""
    from jobwarden.api.auth import create_token

    made = create_token(database_url, tenant=tenant, name=name, scopes=["submit", "read"])
    return {"JOBWARDEN_TOKEN": made.token}


def _file(folder: Path, tenant: str, body: str) -> None:
    (folder / f"{tenant}.toml").write_text(f'tenant = "{tenant}"\n\n{body}')


NIGHTLY = """[schedules.nightly]
cron = "30 2 * * *"
timezone = "Europe/Berlin"
provider = "sandbox"
command = { kind = "export", behaviour = { polls_to_finish = 1 }, day = "{slot_date}" }
overlap = "buffer_one"
catchup_window_seconds = 3600
"""


def test_check_names_file_and_field_and_sync_declares_only_valid_files(
    tmp_path: Path, tenant: str, database_url: str
) -> None:
    _file(tmp_path, tenant, NIGHTLY.replace('"Europe/Berlin"', '"Europe/Berln"'))
    (tmp_path / "typo.toml").write_text(
        f'tenant = "{tenant}"\n\n[schedules.hourly]\ninterval_seconds = 3600\n'
        'provider = "sandbx"\ncommand = { kind = "export" }\n'
    )
    # A real process for the schedules group: the entry point as operators start it.
    checked = run_cli_process("schedules", "check", "--dir", str(tmp_path))
    assert checked.returncode == 1
    lines = checked.stderr.splitlines()
    assert lines[0].startswith(
        f"invalid {tenant}.toml: schedules.nightly.timezone: unknown IANA time zone 'Europe/Berln'"
    )
    assert lines[1].startswith("invalid typo.toml: schedules.hourly: unknown provider 'sandbx'")
    assert "Traceback" not in checked.stderr
    refused = _cli("schedules", "sync", "--dir", str(tmp_path))
    assert refused.returncode == 1
    with transaction(database_url) as session:
        assert schedule_store.views(session, tenant=tenant) == []
    (tmp_path / "typo.toml").unlink()
    _file(tmp_path, tenant, NIGHTLY)
    assert _cli("schedules", "check", "--dir", str(tmp_path)).returncode == 0
    # A typed name is no identity (issue 33): the CLI acts with a token of the tenant.
    typed = _cli("schedules", "sync", "--dir", str(tmp_path), "--by", "ana")
    assert typed.returncode == 2 and "--by: a typed name is not an identity" in typed.stderr
    ana, bo, cy = (_token_env(database_url, tenant, n) for n in ("ana", "bo", "cy"))
    synced = _cli("schedules", "sync", "--dir", str(tmp_path), env=ana)
    assert synced.returncode == 0, synced.stderr
    assert synced.stdout.split() == ["created", f"{tenant}/nightly"]
    again = _cli("schedules", "sync", "--dir", str(tmp_path), env=ana)
    assert again.stdout.split() == ["unchanged", f"{tenant}/nightly"]
    listed = _cli("schedules", "list", "--tenant", tenant, "--json")
    (view,) = json.loads(listed.stdout)
    assert view["status"] == "active" and view["timing"] == "30 2 * * *"
    assert view["overlap"] == "buffer_one" and view["missed"] == 0
    plain = _cli("schedules", "list", "--tenant", tenant)
    header, _, row = plain.stdout.splitlines()
    assert header.split()[:4] == ["SCHEDULE", "STATUS", "TIMING", "OVERLAP"]
    assert row.startswith(f"{tenant}/nightly ")
    assert " active " in row and "30 2 * * * (Europe/Berlin)" in row
    assert row.split()[-3:] == ["-", "-", "0"]  # no last slot, no operation, none missed
    assert _cli("schedules", "pause", "nightly", "--tenant", tenant, env=bo).returncode == 0
    assert (
        json.loads(_cli("schedules", "list", "--tenant", tenant, "--json").stdout)[0]["status"]
        == "paused"
    )
    assert _cli("schedules", "resume", "nightly", "--tenant", tenant, env=cy).returncode == 0
    with transaction(database_url) as session:
        acts = session.execute(
            select(ScheduleActionRow.action, ScheduleActionRow.actor)
            .join(ScheduleRow, ScheduleRow.schedule_id == ScheduleActionRow.schedule_id)
            .where(ScheduleRow.tenant == tenant)
            .order_by(ScheduleActionRow.action_id)
        ).all()
    assert [tuple(a) for a in acts] == [
        ("declared", "token:ana"),
        ("paused", "token:bo"),
        ("resumed", "token:cy"),
    ]
    # Another tenant's token changes nothing here.
    other = _token_env(database_url, tenant_name(), "eve")
    foreign = _cli("schedules", "pause", "nightly", "--tenant", tenant, env=other)
    assert foreign.returncode == 1 and "is not the token's tenant" in foreign.stderr
    missing = _cli("schedules", "pause", "nope", "--tenant", tenant, env=bo)
    assert missing.returncode == 2 and f"no schedule 'nope' for tenant '{tenant}'" in missing.stderr


def test_a_paused_schedule_fires_nothing_and_resumes_within_its_catch_up_window(
    tenant: str, database_url: str
) -> None:
    rt = current()
    start = datetime(2026, 6, 1, tzinfo=UTC)
    spec = parse_spec(
        tenant, "every-minute", {"interval_seconds": 60, "start": "2026-06-01T00:00:00Z",
        "provider": "sandbox", "command": {"kind": "export"}, "catchup_window_seconds": 120,
        "overlap": "allow_all"},
        key_limit=200,
    )  # fmt: skip
    with transaction(database_url) as session:
        schedule_store.declare(session, spec, source="test", actor="pytest", now=start)
        row = schedule_store.find(session, tenant, "every-minute", lock=True)
        assert row is not None
        schedule_store.set_status(session, row, ScheduleStatus.paused,
                                  actor="pytest", now=start)  # fmt: skip
    tick_once(rt, clock=lambda: start + timedelta(minutes=5, seconds=1))
    with transaction(database_url) as session:
        (view,) = schedule_store.views(session, tenant=tenant)
        assert view.last_slot_at is None
        row = schedule_store.find(session, tenant, "every-minute", lock=True)
        assert row is not None
        schedule_store.set_status(session, row, ScheduleStatus.active,
                                  actor="pytest", now=start)  # fmt: skip
    tick_once(rt, clock=lambda: start + timedelta(minutes=5, seconds=1))
    with transaction(database_url) as session:
        row = schedule_store.find(session, tenant, "every-minute")
        assert row is not None
        states = [s.state for s in schedule_store.slots_of(session, row.schedule_id)]
    # 00:00 … 00:03 are more than 120 s late at 00:05:01; 00:04 and 00:05 fire.
    assert states == ["missed"] * 4 + ["fired"] * 2
    families = {f.name: f for f in collect_families(database_url, start + timedelta(minutes=9))}
    missed = families["jobwarden_schedule_missed_slots"].samples
    assert [(s.labels, s.value) for s in missed if s.labels["tenant"] == tenant] == [
        ({"tenant": tenant, "schedule": "every-minute"}, 4.0)
    ]
    # The next slot (00:06) is three minutes due at 00:09 and no tick has run: lag >= 180 s.
    (lag,) = families["jobwarden_schedule_lag_seconds"].samples
    assert lag.value >= 180.0


@pytest.fixture(scope="module")
def client(database_url: str) -> Iterator[httpx.Client]:
    from jobwarden.console.app import create_app

    with serving(create_app()) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


BODY: dict[str, Any] = {
    "cron": "0 3 * * *",
    "timezone": "Europe/Berlin",
    "provider": "sandbox",
    "command": {"kind": "export", "behaviour": {"polls_to_finish": 1}, "at": "{slot}"},
    "overlap": "skip",
}


def test_the_http_api_declares_lists_pauses_triggers_and_backfills_within_the_tenant(
    client: httpx.Client, tenant: str, database_url: str
) -> None:
    writer = make_token(database_url, tenant, "ana", ["submit", "read"])
    reader = make_token(database_url, tenant, "bo", ["read"])
    stranger = make_token(database_url, tenant_name(), "eve", ["submit", "read"])
    made = client.put("/v1/schedules/nightly", json=BODY, headers=writer)
    assert made.status_code == 201, made.text
    assert made.json()["outcome"] == "created" and made.json()["next_slot_at"]
    assert client.put("/v1/schedules/nightly", json=BODY, headers=writer).json()["outcome"] == (
        "unchanged"
    )
    bad = client.put("/v1/schedules/nightly", json=BODY | {"timezone": "Mars/Base"}, headers=writer)
    assert bad.status_code == 422 and bad.json()["type"] == TYPE + "invalid_request"
    assert bad.json()["detail"] == "timezone: unknown IANA time zone 'Mars/Base'"
    refused = client.put("/v1/schedules/other", json=BODY, headers=reader)
    assert refused.status_code == 403
    listed = client.get("/v1/schedules", headers=reader).json()["schedules"]
    assert [s["name"] for s in listed] == ["nightly"]
    # Another tenant sees nothing and touches nothing.
    assert client.get("/v1/schedules", headers=stranger).json() == {"schedules": []}
    assert client.post("/v1/schedules/nightly/pause", headers=stranger).status_code == 404
    assert client.post("/v1/schedules/nightly/trigger", headers=stranger).status_code == 404
    paused = client.post("/v1/schedules/nightly/pause", headers=writer)
    assert paused.status_code == 200 and paused.json()["status"] == "paused"
    fired = client.post("/v1/schedules/nightly/trigger", headers=writer)
    assert fired.status_code == 202 and fired.json()["operation_id"]
    past = (datetime.now(UTC) - timedelta(days=3)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    span = {"from": past.isoformat(), "to": (past + timedelta(days=1, hours=12)).isoformat()}
    first = client.post("/v1/schedules/nightly/backfill", json=span, headers=writer).json()
    assert first["claimed"] == 2 and len(first["operations"]) == 2
    again = client.post("/v1/schedules/nightly/backfill", json=span, headers=writer).json()
    assert again == {"claimed": 0, "already_decided": 2, "operations": []}
    future = {"from": past.isoformat(), "to": "2999-01-01T00:00:00Z"}
    late = client.post("/v1/schedules/nightly/backfill", json=future, headers=writer)
    assert late.status_code == 422 and late.json()["detail"].startswith("to: is in the future")
    one = client.get("/v1/schedules/nightly", headers=reader).json()
    assert [s["origin"] for s in one["slots"]] == ["backfill", "backfill", "trigger"]
    assert {s["requested_by"] for s in one["slots"]} == {"token:ana"}


def test_the_console_lists_the_tenants_schedules_only(
    client: httpx.Client, tenant: str, database_url: str
) -> None:
    from tests.integration.test_console import _csrf

    writer = make_token(database_url, tenant, "ana", ["submit", "read"])
    assert client.put("/v1/schedules/nightly", json=BODY, headers=writer).status_code == 201
    assert client.post("/v1/schedules/nightly/trigger", headers=writer).status_code == 202
    other = tenant_name()
    stranger = make_token(database_url, other, "eve", ["submit", "read"])
    assert client.put("/v1/schedules/secret", json=BODY, headers=stranger).status_code == 201
    with httpx.Client(base_url=str(client.base_url), timeout=30) as browser:
        form = browser.get("/console/login")
        token = writer["Authorization"].split()[1]
        browser.post("/console/login", data={"csrf": _csrf(form.text), "token": token})
        shown = browser.get("/console/schedules")
    assert shown.status_code == 200
    assert 'data-schedule="nightly"' in shown.text and "secret" not in shown.text
    assert "0 3 * * * (Europe/Berlin)" in shown.text and "create_pending" in shown.text
    with transaction(database_url) as session:
        session.execute(delete(ScheduleRow).where(ScheduleRow.tenant == other))
