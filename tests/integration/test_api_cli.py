"""`jobwarden tokens`, `jobwarden tenants`, `jobwarden api` and the intake log in `history`."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from sqlalchemy import text

from jobwarden.api.auth import secret_hash
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.db import transaction
from tests.cli_runner import REPO, run_cli_process
from tests.integration.test_cli import _cli


def _create(tenant: str, *scopes: str) -> tuple[str, str]:
    flags = [a for s in scopes for a in ("--scope", s)]
    done = _cli("tokens", "create", "--tenant", tenant, "--name", "ci-" + tenant, *flags)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    token_id = done.stderr.split()[1]
    return token_id, token


def test_tokens_create_prints_the_token_once_and_stores_only_its_hash(database_url: str) -> None:
    tenant = f"cli-{secrets.token_hex(4)}"
    token_id, token = _create(tenant, "submit", "read")
    assert token.startswith("jw_") and len(token) > 40
    # A real process for the tokens group (the others here run in this one).
    listed = run_cli_process("tokens", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    mine = [t for t in json.loads(listed.stdout) if t["id"] == token_id]
    assert mine and mine[0]["tenant"] == tenant and mine[0]["scopes"] == ["read", "submit"]
    assert mine[0]["last_used"] is None and mine[0]["revoked"] is None
    assert token not in listed.stdout
    with transaction(database_url) as session:
        stored = session.execute(
            text("SELECT secret_hash, name FROM api_tokens WHERE token_id = :id"),
            {"id": token_id},
        ).one()
    assert stored.secret_hash == secret_hash(token) and token not in stored


def test_tokens_create_refuses_an_unknown_scope_in_one_line() -> None:
    done = _cli("tokens", "create", "--tenant", "t", "--name", "n", "--scope", "admin")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "unknown scope 'admin'" in done.stderr


def test_tokens_revoke_marks_the_token_revoked_and_a_second_revoke_exits_1() -> None:
    token_id, _ = _create(f"cli-{secrets.token_hex(4)}", "read")
    assert _cli("tokens", "revoke", token_id).returncode == 0
    listed = json.loads(_cli("tokens", "list", "--json").stdout)
    assert [t["revoked"] is not None for t in listed if t["id"] == token_id] == [True]
    assert _cli("tokens", "revoke", token_id).returncode == 1


def test_tenants_allow_self_approval_turns_the_setting_on_and_off(database_url: str) -> None:
    tenant = f"cli-{secrets.token_hex(4)}"
    assert _cli("tenants", "allow-self-approval", tenant).returncode == 0
    with transaction(database_url) as session:
        assert api_store.allows_self_approval(session, tenant)
    assert _cli("tenants", "allow-self-approval", tenant, "--off").returncode == 0
    with transaction(database_url) as session:
        assert not api_store.allows_self_approval(session, tenant)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_jobwarden_api_serves_the_app_and_history_shows_each_intake_attempt(
    database_url: str, tmp_path: Path
) -> None:
    port = _free_port()
    tenant = f"cli-{secrets.token_hex(4)}"
    _, token = _create(tenant, "submit")
    log_file = tmp_path / "api.log"
    with log_file.open("wb") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-m", "jobwarden.cli.main", "api", "--port", str(port)],
            cwd=REPO,
            env={**os.environ, "JOBWARDEN_API_HOST": "127.0.0.1", "JOBWARDEN_LOG_FORMAT": "json"},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "api did not start"
            time.sleep(0.1)  # polling a condition (the port answers), with a deadline
        assert httpx.get(f"{base}/openapi.json", timeout=5).json()["paths"]["/v1/operations"]
        key = secrets.token_hex(8)
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
        body = {"provider": "sandbox", "command": {"kind": "export"}}
        first = httpx.post(f"{base}/v1/operations", json=body, headers=headers, timeout=10)
        httpx.post(f"{base}/v1/operations", json=body, headers=headers, timeout=10)
        assert first.status_code == 201, first.text
    finally:
        server.terminate()
        server.wait(timeout=30)
    story = _cli("history", first.json()["operation_id"])
    assert story.returncode == 0, story.stderr
    intake = [line for line in story.stdout.splitlines() if " intake " in line]
    assert len(intake) == 2
    assert "created" in intake[0] and "replayed" in intake[1]
    assert all("door=http" in line and "http=201" in line for line in intake)
    # One structured access line per request, from jobwarden's middleware; uvicorn's own
    # preformatted access line is off.
    records = [json.loads(line) for line in log_file.read_text().splitlines() if line]
    assert not [r for r in records if r.get("logger") == "uvicorn.access"]
    posts = [r for r in records if r["event"] == "http_request" and r["path"] == "/v1/operations"]
    assert [(r["method"], r["status"], r["tenant"]) for r in posts] == [
        ("POST", 201, tenant),
        ("POST", 201, tenant),
    ]
    assert {r["trace_id"] for r in posts} == {first.json()["trace_id"]}
    assert all(r["level"] == "info" and r["duration_ms"] > 0 for r in posts)
