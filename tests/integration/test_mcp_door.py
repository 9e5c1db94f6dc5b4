"""The MCP door (issue 13, item 4): SDK clients against `jobwarden mcp`, over stdio and HTTP.

The stdio server is the agents guide's configuration snippet (docs/how-to/agents.md) run
as a subprocess; the HTTP server is `jobwarden mcp --transport http` on a free port. Both
talk to the test's scratch database and Redis prefix; no worker runs, so operations stay
where their intake left them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp_types import CallToolResult, JSONRPCResponse, TextContent

from jobwarden.api.auth import new_token, secret_hash
from jobwarden.config.settings import Settings
from jobwarden.mcp.server import RETRY_RULE, build_server
from jobwarden.models.persistence import api_store, store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from tests.cli_runner import REPO
from tests.integration.api_helpers import NOW, insert_operation, tenant_name
from tests.integration.test_cli import _cli

# The agents' how-to guide of the docs site carries the snippet (it was the README's).
GUIDE = REPO / "docs" / "how-to" / "agents.md"
COMMAND = {"kind": "export", "behaviour": {"polls_to_finish": 1}}
ALL = ("submit", "read", "cancel")
WAIT = 30.0  # seconds any one exchange with a server may take before the test fails


def _token(url: str, tenant: str, scopes: tuple[str, ...] = ALL, name: str = "agent") -> str:
    token = new_token()
    with transaction(url) as session:
        api_store.insert_token(
            session,
            token_id=uuid.uuid4(),
            tenant=tenant,
            name=name,
            secret_hash=secret_hash(token),
            scopes=list(scopes),
            now=NOW,
        )
    return token


def _readme_server() -> dict[str, Any]:
    """The stdio server entry of the agents guide's JSON snippet (docs/how-to/agents.md)."""
    block = re.search(r"```json\n(.*?)```", GUIDE.read_text(), flags=re.S)
    assert block is not None, "docs/how-to/agents.md has no json snippet"
    entry: dict[str, Any] = json.loads(block.group(1))["mcpServers"]["jobwarden"]
    return entry


def _stdio_params(token: str) -> StdioServerParameters:
    """The guide's snippet as written, its values pointed at this test's servers."""
    entry = _readme_server()
    ours = {
        "JOBWARDEN_MCP_TOKEN": token,
        "JOBWARDEN_DATABASE_URL": os.environ["JOBWARDEN_DATABASE_URL"],
        "JOBWARDEN_BROKER_URL": os.environ["JOBWARDEN_BROKER_URL"],
        "JOBWARDEN_REDIS_URL": os.environ["JOBWARDEN_REDIS_URL"],
    }
    assert set(entry["env"]) == set(ours), "the snippet names exactly what the server needs"
    # The snippet's "jobwarden" is the installed script, beside this interpreter.
    command = shutil.which(entry["command"], path=str(Path(sys.executable).parent))
    assert command is not None, f"no {entry['command']} script beside {sys.executable}"
    isolation = {k: os.environ[k] for k in ("JOBWARDEN_KEY_PREFIX", "JOBWARDEN_QUEUE")}
    return StdioServerParameters(
        command=command, args=entry["args"], env={**ours, **isolation}, cwd=REPO
    )


@asynccontextmanager
async def losing_the_first_answer(
    params: StdioServerParameters, lost: anyio.Event
) -> AsyncIterator[Any]:
    """stdio to the server, except that the first tool answer never reaches the client."""
    async with stdio_client(params) as (read, write):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)

        async def relay() -> None:
            async with send:
                async for item in read:
                    message = item.message if isinstance(item, SessionMessage) else None
                    answer = isinstance(message, JSONRPCResponse) and "structuredContent" in (
                        message.result or {}
                    )
                    if answer and not lost.is_set():
                        lost.set()  # dropped on the floor: the agent never sees it
                        continue
                    await send.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(relay)
            yield receive, write
            tg.cancel_scope.cancel()


def _answer(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def _error(result: CallToolResult) -> str:
    assert result.is_error and result.structured_content is None
    text = " ".join(c.text for c in result.content if isinstance(c, TextContent))
    assert "Traceback" not in text
    return text


def test_an_agent_that_lost_the_answer_calls_again_with_the_same_key_and_gets_it_replayed(
    database_url: str,
) -> None:
    tenant = tenant_name()
    key = f"order-{secrets.token_hex(4)}-export"
    arguments = {"operation_key": key, "provider": "sandbox", "command": COMMAND}
    params = _stdio_params(_token(database_url, tenant))
    lost = anyio.Event()

    async def agent() -> tuple[dict[str, Any], dict[str, Any]]:
        with anyio.fail_after(WAIT):
            async with Client(losing_the_first_answer(params, lost)) as client:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(client.call_tool, "start_operation", arguments)
                    await lost.wait()
                    tg.cancel_scope.cancel()  # the agent gives up on the lost answer
                again = _answer(await client.call_tool("start_operation", arguments))
                changed = {**arguments, "command": {**COMMAND, "kind": "other"}}
                conflict = _answer(await client.call_tool("start_operation", changed))
                return again, conflict

    again, conflict = anyio.run(agent)
    with transaction(database_url) as session:
        row = store.find_by_key(session, tenant, key)
        intake = api_store.intake_for_key(session, tenant, key)
    assert row is not None
    # The lost answer was recorded all the same; the retry names that very operation.
    assert [(e.door, e.outcome) for e in intake] == [
        ("mcp", "created"),
        ("mcp", "replayed"),
        ("mcp", "conflict"),
    ]
    assert again["outcome"] == "replayed" and again["operation_id"] == str(row.operation_id)
    assert again["fingerprint"] == row.request_fingerprint
    assert intake[0].actor == "token:agent" and intake[0].token_id is not None
    # A changed command under the key: conflict, and the stored operation is untouched.
    assert conflict["outcome"] == "conflict" and conflict["operation_id"] == str(row.operation_id)
    assert conflict["fingerprint"] != row.request_fingerprint
    assert "ask for a new operation" in conflict["next_step"]
    with transaction(database_url) as session:
        after = store.find_by_key(session, tenant, key)
    assert after is not None and after.version == row.version
    assert after.request_fingerprint == row.request_fingerprint


def _in_process(url: str, token: str) -> Client:
    return Client(build_server(Settings(database_url=url), stdio_token=token))


def test_start_operations_description_and_the_server_instructions_state_the_retry_rule(
    database_url: str,
) -> None:
    async def tools() -> dict[str, str]:
        async with _in_process(database_url, _token(database_url, tenant_name())) as client:
            listed = await client.list_tools()
            described = {t.name: t.description or "" for t in listed.tools}
            return described | {"(instructions)": client.instructions or ""}

    described = anyio.run(tools)
    assert set(described) >= {
        "start_operation",
        "get_operation",
        "cancel_operation",
        "list_escalations",
    }
    for where in ("start_operation", "(instructions)"):
        text = described[where]
        assert RETRY_RULE in text
        assert "same operation_key" in text and "conflict" in text
        assert "Never invent a new operation_key for the same intent" in text


def test_tool_errors_name_the_field_or_the_rule_and_never_show_a_traceback(
    database_url: str,
) -> None:
    tenant = tenant_name()
    mine = insert_operation(database_url, tenant, S.succeeded)

    async def calls() -> list[str]:
        async with _in_process(database_url, _token(database_url, tenant)) as client:
            start = {"operation_key": "k-1", "provider": "sandbox", "command": COMMAND}
            return [
                _error(await client.call_tool("start_operation", {**start, "provider": "nope"})),
                _error(await client.call_tool("start_operation", {**start, "command": [1]})),
                _error(await client.call_tool("start_operation", {**start, "operation_key": ""})),
                _error(await client.call_tool("start_operation", {**start, "operation_key": " "})),
                _error(
                    await client.call_tool(
                        "start_operation", {**start, "bounds": {"result_deadline_seconds": 1e9}}
                    )
                ),
                _error(
                    await client.call_tool(
                        "start_operation", {**start, "bounds": {"max_status_requests": 0}}
                    )
                ),
                _error(await client.call_tool("get_operation", {"operation_id": "not-a-uuid"})),
                _error(
                    await client.call_tool(
                        "cancel_operation",
                        {"operation_id": str(mine), "reason": "no longer needed"},
                    )
                ),
                _error(await client.call_tool("list_escalations", {"cursor": "bogus"})),
            ]

    provider, command, empty, blank, deadline, bounds, malformed, ended, cursor = anyio.run(calls)
    assert "invalid_submission: unknown provider 'nope'" in provider
    assert "command" in command
    # The schema's refusals (the SDK's) and the intake's rules name this door's fields.
    assert "operation_key" in empty and "at least 1 character" in empty
    assert "invalid_submission: operation_key is required" in blank
    assert "invalid_submission: bounds.result_deadline_seconds must be at most" in deadline
    assert "bounds.max_status_requests" in bounds and "greater than 0" in bounds
    assert "not_found: operation_id 'not-a-uuid'" in malformed
    assert "conflict: the operation has ended (succeeded)" in ended
    assert "cursor" in cursor


def test_a_stdio_token_is_looked_up_on_every_call_so_revoking_it_stops_the_next_call(
    database_url: str,
) -> None:
    tenant = tenant_name()
    token = _token(database_url, tenant, ("read",))

    async def calls() -> tuple[dict[str, Any], str, str]:
        async with _in_process(database_url, token) as client:
            listed = _answer(await client.call_tool("list_escalations", {}))
            start = {"operation_key": "k", "provider": "sandbox", "command": COMMAND}
            scope = _error(await client.call_tool("start_operation", start))
            with transaction(database_url) as session:
                record = api_store.token_by_hash(session, secret_hash(token))
                assert record is not None
                api_store.revoke_token(session, record.token_id, now=NOW)
            revoked = _error(await client.call_tool("list_escalations", {}))
            return listed, scope, revoked

    listed, scope, revoked = anyio.run(calls)
    assert listed["counts"]["total"] == 0
    assert "insufficient_scope" in scope and "'submit'" in scope
    assert "unauthenticated" in revoked


def test_jobwarden_mcp_over_stdio_refuses_to_start_without_a_live_token() -> None:
    missing = _cli("mcp", env={"JOBWARDEN_MCP_TOKEN": ""})
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip().count("\n") == 0 and "JOBWARDEN_MCP_TOKEN" in missing.stderr
    other = _cli("mcp", "--token-env", "AGENT_TOKEN", env={"AGENT_TOKEN": "jw_unknown"})
    assert other.returncode == 2
    assert "AGENT_TOKEN: the API token is unknown or revoked" in other.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server() -> Iterator[str]:
    """`jobwarden mcp --transport http` on a free port; yields the /mcp URL once it listens."""
    port = _free_port()
    argv = [sys.executable, "-m", "jobwarden.cli.main", "mcp", "--transport", "http"]
    # A file, not a pipe nobody reads: the access log must never block the server.
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(
            [*argv, "--port", str(port)],
            cwd=REPO,
            env=dict(os.environ),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            deadline = time.monotonic() + WAIT
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        log.seek(0)
                        raise RuntimeError(f"jobwarden mcp did not listen: {log.read()}") from None
                    time.sleep(0.05)  # polling a condition (the port accepts), with a deadline
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            process.wait(timeout=WAIT)


@asynccontextmanager
async def http_client(url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    """An SDK client sending the token on every request; mode "legacy" is the
    initialize handshake most agent hosts speak today, "auto" the newest protocol."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=WAIT) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


def test_over_streamable_http_a_bad_token_is_refused_and_tenants_never_see_each_other(
    database_url: str,
) -> None:
    ours, theirs = tenant_name(), tenant_name()
    our_token, their_token = _token(database_url, ours), _token(database_url, theirs)
    reader = _token(database_url, ours, ("read",), name="reader")
    escalated = insert_operation(database_url, ours, S.escalated, escalation_reason="unknown_state")
    key = f"http-{secrets.token_hex(4)}"
    start = {"operation_key": key, "provider": "sandbox", "command": COMMAND}

    with http_server() as url:
        # RFC 6750 section 3: a request without a live token is 401 with a Bearer challenge.
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        for headers in ({}, {"Authorization": "Bearer jw_not-a-token"}):
            refused = httpx.post(url, json=ping, headers=headers, timeout=WAIT)
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert refused.headers["content-type"] == "application/problem+json"

        async def agents() -> dict[str, Any]:
            with anyio.fail_after(WAIT):
                async with http_client(url, our_token) as client:
                    created = _answer(await client.call_tool("start_operation", start))
                    replayed = _answer(await client.call_tool("start_operation", start))
                    seen = _answer(
                        await client.call_tool(
                            "get_operation", {"operation_id": created["operation_id"]}
                        )
                    )
                    our_list = _answer(await client.call_tool("list_escalations", {}))
                async with http_client(url, their_token, mode="legacy") as client:
                    foreign = [
                        _error(await client.call_tool("get_operation", {"operation_id": op}))
                        for op in (created["operation_id"], str(escalated))
                    ]
                    cancel = _error(
                        await client.call_tool(
                            "cancel_operation",
                            {"operation_id": created["operation_id"], "reason": "not mine"},
                        )
                    )
                    their_list = _answer(await client.call_tool("list_escalations", {}))
                    # Their key is theirs: the same key and command make another operation.
                    their_start = _answer(await client.call_tool("start_operation", start))
                async with http_client(url, reader) as client:
                    unscoped = _error(await client.call_tool("start_operation", start))
            return {
                "created": created,
                "replayed": replayed,
                "seen": seen,
                "our_list": our_list,
                "foreign": foreign,
                "cancel": cancel,
                "their_list": their_list,
                "their_start": their_start,
                "unscoped": unscoped,
            }

        got = anyio.run(agents)

    assert got["created"]["outcome"] == "created" and got["created"]["state"] == "create_pending"
    assert got["replayed"]["outcome"] == "replayed"
    assert got["replayed"]["operation_id"] == got["created"]["operation_id"]
    assert got["seen"]["tenant"] == ours and got["seen"]["idempotency_key"] == key
    # The agent reads the create as it leaves: the provider's route, the credential hidden.
    create = got["seen"]["create_request"]
    assert create["method"] == "POST" and create["url"].endswith("/v1/jobs")
    assert create["headers"]["Authorization"] == "Bearer [redacted]"
    assert json.loads(create["body"]) == COMMAND
    assert [e["operation_id"] for e in got["our_list"]["escalations"]] == [str(escalated)]
    # Another tenant's operation reads exactly like one that does not exist.
    for text in (*got["foreign"], got["cancel"]):
        assert "not_found" in text and ours not in text
    assert got["their_list"]["counts"]["total"] == 0 and got["their_list"]["escalations"] == []
    assert got["their_start"]["outcome"] == "created"
    assert got["their_start"]["operation_id"] != got["created"]["operation_id"]
    assert "insufficient_scope" in got["unscoped"] and "'submit'" in got["unscoped"]
    with transaction(database_url) as session:
        row = store.load(session, uuid.UUID(got["created"]["operation_id"]))
        intake = api_store.intake_for_key(session, ours, key)
    assert row is not None and row.state is S.create_pending  # the foreign cancel touched nothing
    assert [(e.door, e.outcome) for e in intake] == [("mcp", "created"), ("mcp", "replayed")]


def test_start_operation_passes_the_concurrency_key_to_the_intake_which_fingerprints_it(
    database_url: str,
) -> None:
    tenant = tenant_name()
    key = f"deploy-{secrets.token_hex(4)}"
    start = {"operation_key": key, "provider": "sandbox", "command": COMMAND}
    target = {**start, "concurrency_key": "deploy:payments:production"}

    async def calls() -> tuple[dict[str, Any], dict[str, Any], str]:
        async with _in_process(database_url, _token(database_url, tenant)) as client:
            created = _answer(await client.call_tool("start_operation", target))
            # The key is part of the request: the same operation_key without it is another one.
            without = _answer(await client.call_tool("start_operation", start))
            bad = _error(
                await client.call_tool(
                    "start_operation", {**target, "operation_key": "k2", "concurrency_key": ""}
                )
            )
            return created, without, bad

    created, without, bad = anyio.run(calls)
    assert created["outcome"] == "created" and without["outcome"] == "conflict"
    assert "invalid_submission: concurrency_key must not be empty" in bad
    with transaction(database_url) as session:
        row = store.find_by_key(session, tenant, key)
    assert row is not None and row.concurrency_key == "deploy:payments:production"


def test_a_traceparent_in_the_calls_meta_gives_the_operation_its_trace_id(
    database_url: str,
) -> None:
    # MCP SEP-414: W3C Trace Context keys (traceparent) travel in params._meta.
    tenant, trace_id = tenant_name(), secrets.token_hex(16)
    start = {"operation_key": "traced", "provider": "sandbox", "command": COMMAND}
    meta: Any = {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}

    async def call() -> dict[str, Any]:
        async with _in_process(database_url, _token(database_url, tenant)) as client:
            return _answer(await client.call_tool("start_operation", start, meta=meta))

    answer = anyio.run(call)
    assert answer["trace_id"] == trace_id
    with transaction(database_url) as session:
        row = store.find_by_key(session, tenant, "traced")
    assert row is not None and row.trace_id == trace_id


def test_start_operation_passes_the_business_deadline_to_the_intake(database_url: str) -> None:
    tenant = tenant_name()
    start = {"operation_key": "window", "provider": "sandbox", "command": COMMAND}
    at = "2099-01-01T09:00:00+00:00"

    async def calls() -> tuple[dict[str, Any], dict[str, Any], str]:
        async with _in_process(database_url, _token(database_url, tenant)) as client:
            created = _answer(
                await client.call_tool("start_operation", {**start, "business_deadline": at})
            )
            # Not part of the fingerprint: a retry naming it again in seconds is the same request.
            again = _answer(
                await client.call_tool("start_operation", {**start, "business_deadline": 60})
            )
            bad = _error(
                await client.call_tool(
                    "start_operation",
                    {**start, "operation_key": "w2", "business_deadline": "2099-01-01T09:00:00"},
                )
            )
            return created, again, bad

    created, again, bad = anyio.run(calls)
    assert created["outcome"] == "created" and again["outcome"] == "replayed"
    assert "invalid_submission: business_deadline must name its UTC offset" in bad
    with transaction(database_url) as session:
        row = store.find_by_key(session, tenant, "window")
    assert row is not None and row.business_deadline is not None
    assert row.business_deadline.isoformat() == at


def test_the_mcp_door_answers_as_the_python_door_for_one_key_and_one_source_event(
    database_url: str,
) -> None:
    from jobwarden.tasks.intake import submit_operation

    tenant, key = tenant_name(), f"cross-{secrets.token_hex(4)}"
    python = submit_operation(
        tenant=tenant,
        provider="sandbox",
        idempotency_key=key,
        command=COMMAND,
        requested_by="billing",
        source_event_id="invoice-7",
    )
    start = {"operation_key": key, "provider": "sandbox", "command": COMMAND}

    async def calls() -> tuple[dict[str, Any], dict[str, Any]]:
        async with _in_process(database_url, _token(database_url, tenant)) as client:
            same = _answer(await client.call_tool("start_operation", start))
            event = {**start, "operation_key": f"{key}-b", "source_event_id": "invoice-7"}
            return same, _answer(await client.call_tool("start_operation", event))

    same, duplicate = anyio.run(calls)
    # One fingerprint whichever door: the key holds the Python door's operation.
    assert same["outcome"] == "replayed" and same["operation_id"] == python.operation_id
    assert same["fingerprint"] == python.fingerprint
    assert duplicate["outcome"] == "duplicate_event"
    assert duplicate["operation_id"] == python.operation_id
    assert "already has an operation" in duplicate["next_step"]
