"""No silent wait on a dead queue (issue 36, point 5): every door says when no worker
consumes the operations' queue, and stops saying so while one does.

The README once showed ``jobwarden submit`` before it said how to start a worker; done
in that order, the operation ended ``failed`` 70 s later with no word that nothing
consumed its queue. Here each door (the Python call, HTTP, MCP, the CLI, /readyz and
the console) is asked on a queue of this module's own: with no worker, with a real
``celery worker`` running, after that worker is killed (its heartbeat ages past the
silence threshold) and after a graceful stop (its heartbeat is removed at once).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from jobwarden.config.settings import Settings
from jobwarden.console.app import create_app
from jobwarden.demo.harness import Stack, wait_for
from jobwarden.mcp.server import build_server
from jobwarden.models.intake.submission import SubmissionRequest
from jobwarden.tasks.heartbeat import heartbeat_key, no_worker
from jobwarden.tasks.intake import submit_request
from jobwarden.tasks.runtime import Runtime, build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from tests.api_server import serving
from tests.cli_runner import run_cli
from tests.integration.api_helpers import make_token, tenant_name

COMMAND: dict[str, Any] = {"kind": "export", "behaviour": {"polls_to_finish": 1}}
# Short, so a killed worker's heartbeat ages past the threshold within the test's wait.
HEARTBEAT_SECONDS = 0.5
SILENCE_SECONDS = 3.0
WAIT = 60.0


@dataclass
class Doors:
    settings: Settings
    env: dict[str, str]
    rt: Runtime
    api: str
    tenant: str
    token: str


@pytest.fixture(scope="module")
def doors(database_url: str) -> Iterator[Doors]:
    # A queue and key prefix of this module's own: no other test's worker stamps them.
    queue = f"{os.environ['JOBWARDEN_QUEUE']}-noworker-{secrets.token_hex(3)}"
    env = {
        "JOBWARDEN_QUEUE": queue,
        "JOBWARDEN_KEY_PREFIX": f"{os.environ['JOBWARDEN_KEY_PREFIX']}-{queue}",
        "JOBWARDEN_WORKER_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
        "JOBWARDEN_WORKER_SILENCE_SECONDS": str(SILENCE_SECONDS),
    }
    settings = Settings(
        queue=env["JOBWARDEN_QUEUE"],
        key_prefix=env["JOBWARDEN_KEY_PREFIX"],
        worker_heartbeat_seconds=HEARTBEAT_SECONDS,
        worker_silence_seconds=SILENCE_SECONDS,
    )
    tenant = tenant_name()
    token = make_token(database_url, tenant, "svc", ["submit", "read"])["Authorization"]
    rt = build_runtime(settings)
    try:
        with serving(create_app(settings)) as api:
            yield Doors(settings, env, rt, api, tenant, token.split()[1])
    finally:
        close_runtime(rt)
        rt.redis.delete(heartbeat_key(settings.key_prefix, settings.queue))


def _key() -> str:
    return f"nw-{secrets.token_hex(6)}"


def python_door(d: Doors) -> bool:
    wanted = SubmissionRequest(
        tenant=d.tenant,
        requested_by="svc",
        provider="sandbox",
        command=COMMAND,
        idempotency_key=_key(),
    )
    result = submit_request(wanted, door="python", runtime=d.rt)
    assert result.outcome.value == "created"
    codes = [w.code for w in result.warnings]
    assert codes in ([], ["no_worker"]), codes
    return bool(codes)


def http_door(d: Doors) -> bool:
    answer = httpx.post(
        f"{d.api}/v1/operations",
        json={"provider": "sandbox", "command": COMMAND},
        headers={"Authorization": f"Bearer {d.token}", "Idempotency-Key": _key()},
        timeout=WAIT,
    )
    assert answer.status_code == 201, answer.text
    warnings = answer.json()["warnings"]
    header = answer.headers.get("jobwarden-warning")
    if warnings:
        assert [w["code"] for w in warnings] == ["no_worker"], warnings
        assert warnings[0]["queue"] == d.settings.queue
        assert f"-Q {d.settings.queue}" in warnings[0]["detail"]
        assert header == "no_worker"
    else:
        assert header is None
    return bool(warnings)


def mcp_door(d: Doors) -> bool:
    async def call() -> Any:
        with anyio.fail_after(WAIT):
            async with Client(build_server(d.settings, stdio_token=d.token)) as client:
                return await client.call_tool(
                    "start_operation",
                    {"operation_key": _key(), "provider": "sandbox", "command": COMMAND},
                )

    result = anyio.run(call)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    warnings = result.structured_content["warnings"]
    assert all(w.startswith("no_worker: no worker has consumed queue") for w in warnings)
    return bool(warnings)


def cli_door(d: Doors) -> bool:
    done = run_cli(
        *("submit", "sandbox", json.dumps(COMMAND), "--key", _key()),
        *("--tenant", d.tenant, "--requested-by", "svc"),
        env=d.env,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)  # stdout stays the JSON a script reads
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if answer["warnings"]:
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("warning: no worker has consumed queue"), lines
    else:
        assert lines == [], done.stderr
    return bool(answer["warnings"])


def readyz(d: Doors) -> bool:
    ready = httpx.get(f"{d.api}/readyz", timeout=WAIT)
    # Reported, never failed on: intake works without workers (the API's readiness).
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["workers"] in ("ok", "none")
    assert (body["workers"] == "none") == bool(body["warnings"])
    return bool(body["workers"] == "none")


def console(d: Doors) -> bool:
    with httpx.Client(base_url=d.api, timeout=WAIT) as client:
        form = client.get("/console/login")
        found = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert found is not None, form.text
        login = client.post("/console/login", data={"csrf": found.group(1), "token": d.token})
        assert login.status_code == 303, login.text
        queue = client.get("/console/")
    assert queue.status_code == 200, queue.text
    return "No workers running" in queue.text


DOORS = {
    "python": python_door,
    "http": http_door,
    "mcp": mcp_door,
    "cli": cli_door,
    "readyz": readyz,
    "console": console,
}


def said(d: Doors) -> dict[str, bool]:
    """Whether each door said that no worker consumes the queue."""
    return {name: door(d) for name, door in DOORS.items()}


def _unattended(d: Doors) -> bool:
    return no_worker(d.rt.redis, d.settings) is not None


def _stamped(d: Doors) -> list[str]:
    """The workers (by name, before the @host) with a stamp on the queue, live or aged."""
    members = d.rt.redis.zrange(heartbeat_key(d.settings.key_prefix, d.settings.queue), 0, -1)
    return [m.decode().split("@", 1)[0] for m in members if isinstance(m, bytes)]


def test_with_no_worker_every_door_says_so(doors: Doors) -> None:
    assert said(doors) == dict.fromkeys(DOORS, True)


@pytest.mark.timeout(300)
def test_a_live_worker_silences_every_door_and_its_death_makes_them_speak_again(
    doors: Doors, tmp_path: Path
) -> None:
    stack = Stack(doors.env, log_dir=tmp_path)
    try:
        stack.start_worker("hb", concurrency=1, notifications=False)
        stack.wait_ready("hb")
        wait_for(lambda: not _unattended(doors), timeout=WAIT, what="the worker's heartbeat")
        assert said(doors) == dict.fromkeys(DOORS, False), stack.logs()
        # Killed, it removes nothing: its last heartbeat ages past the silence threshold.
        stack.kill_worker("hb")
        wait_for(lambda: _unattended(doors), timeout=WAIT, what="the heartbeat to go stale")
        assert said(doors) == dict.fromkeys(DOORS, True)
        # Stopped gracefully, it takes its heartbeat with it: no silence to wait out. (The
        # killed worker's stamp stays, aged: only the stopped one's is removed.)
        stack.start_worker("hb2", concurrency=1, notifications=False)
        stack.wait_ready("hb2")
        wait_for(lambda: not _unattended(doors), timeout=WAIT, what="the new heartbeat")
        assert sorted(_stamped(doors)) == ["hb", "hb2"]
        stack.stop()
        assert _stamped(doors) == ["hb"]
        assert _unattended(doors)
        assert python_door(doors) and http_door(doors)
    finally:
        stack.stop()
