"""What operators reach for from the repository root: alembic, --version, exit codes a
script can branch on, one line for a busy sandbox port, and a compose file fit to run."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import create_engine, inspect

from tests.conftest import scratch_database
from tests.integration.test_cli import _cli

REPO = Path(__file__).resolve().parents[2]


def test_alembic_upgrade_head_works_from_the_repository_root() -> None:
    with scratch_database("jobwarden_alembic") as url:
        done = subprocess.run(
            [sys.executable, "-m", "alembic", "upgrade", "head"],
            cwd=REPO,
            env={**os.environ, "JOBWARDEN_DATABASE_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        engine = create_engine(url)
        try:
            assert {"operations", "operation_events"} <= set(inspect(engine).get_table_names())
        finally:
            engine.dispose()


def test_version_prints_the_installed_version() -> None:
    done = _cli("--version")
    assert done.returncode == 0
    assert done.stdout.strip().startswith("jobwarden ")


def test_a_conflicting_submission_exits_3_and_touches_nothing(database_url: str) -> None:
    key = secrets.token_hex(8)
    first = _cli("submit", "sandbox", '{"kind": "export"}', "--key", key)
    assert first.returncode == 0, first.stderr
    again = _cli("submit", "sandbox", '{"kind": "export"}', "--key", key)
    assert again.returncode == 0 and json.loads(again.stdout)["outcome"] == "replayed"
    other = _cli("submit", "sandbox", '{"kind": "other"}', "--key", key)
    assert other.returncode == 3
    assert json.loads(other.stdout)["outcome"] == "conflict"


def test_a_busy_sandbox_port_is_one_line_and_exit_2() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = _cli("sandbox", "--port", str(port))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: sandbox port 127.0.0.1:{port} is in use (--port / JOBWARDEN_SANDBOX_PORT)"
    ]


def _compose() -> dict[str, Any]:
    loaded = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_compose_stack_migrates_once_before_workers_and_beat_start() -> None:
    services = _compose()["services"]
    for name in ("worker", "beat"):
        needs = services[name]["depends_on"]
        assert needs["migrate"]["condition"] == "service_completed_successfully", name
        assert needs["valkey"]["condition"] == "service_healthy", name
        assert services[name].get("restart"), name
    # Postgres is healthy before the migration runs, so before anything that waits for it.
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" in services["postgres"] and "healthcheck" in services["valkey"]
    assert "noeviction" in json.dumps(services["valkey"])


def test_the_compose_worker_outlives_its_lease_when_stopped_and_beat_runs_once() -> None:
    services = _compose()["services"]
    grace = services["worker"]["stop_grace_period"]
    seconds = int(str(grace).rstrip("s"))
    assert seconds > 150  # the default JOBWARDEN_LEASE_TTL_SECONDS
    assert services["beat"].get("deploy", {}).get("replicas", 1) == 1


def test_flower_needs_a_login_and_the_sandbox_only_runs_in_the_demo_profile() -> None:
    services = _compose()["services"]
    flower = json.dumps(services["flower"])
    assert "basic_auth" in flower.lower() or "FLOWER_BASIC_AUTH" in flower
    assert all(str(p).startswith("127.0.0.1:") for p in services["flower"].get("ports", []))
    assert services["sandbox"]["profiles"] == ["demo"]


def test_every_compose_service_running_jobwarden_shares_one_durable_result_store() -> None:
    loaded = _compose()
    services = loaded["services"]
    # A result is an artifact (issue 21): workers write it, the API and the CLI read it back.
    for name in ("worker", "beat", "migrate", "cli", "flower", "sandbox", "api", "mcp"):
        service = services[name]
        store = service["environment"]["JOBWARDEN_RESULT_STORE"]
        assert store.endswith("file:///var/lib/jobwarden/results}"), name
        assert "results:/var/lib/jobwarden/results" in service["volumes"], name
        assert service["environment"]["JOBWARDEN_PROVIDERS_DIR"] == "/etc/jobwarden/providers"
    assert "results" in loaded["volumes"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "install -d -o jobwarden -g jobwarden /var/lib/jobwarden/results" in dockerfile
