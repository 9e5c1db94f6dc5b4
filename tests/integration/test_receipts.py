"""Receipts of a real operation (issue 40): issued by the CLI, the HTTP API and the MCP tool,
verified offline, every tamper named.

The operation runs through the pipeline's own steps against an in-process sandbox
provider whose contract needs an approval (so the receipt carries an approver), against
the real database and Redis. The offline verify is a separate process with no
JOBWARDEN_* settings at all, run with ``python -I``, in a network namespace of its own
where `unshare -n` works, and with an audit hook that ends it on any socket connect or
name lookup, and on any import of a database, Redis or HTTP client, either way.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_public_key,
)
from mcp import Client
from mcp_types import TextContent
from pydantic import SecretStr

from jobwarden.api.app import create_app
from jobwarden.config.settings import Settings
from jobwarden.demo.harness import REPO
from jobwarden.demo.sandbox.server import SandboxServer
from jobwarden.mcp.server import build_server
from jobwarden.models.history.receipts import signed, verify_receipt
from jobwarden.models.intake.submission import SubmissionRequest
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import STEPS
from jobwarden.tasks import runtime as runtime_module
from jobwarden.tasks.humans.interventions import approve
from jobwarden.tasks.intake import submit_request
from jobwarden.tasks.runtime import Runtime, build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from jobwarden.tasks.steps import run
from tests.api_server import serving
from tests.integration.api_helpers import load, make_token, tenant_name
from tests.integration.test_pinned_contracts import _due_now

PROVIDER = "sandbox_receipts"
TOKEN = "sandbox-receipts-token"
MAX_STEPS = 12
KEY_PATH = "/.well-known/jobwarden-receipt-key"
# Run in the offline verifier (``python -I``: no PYTHON* variables, no user site) before
# the CLI: the tree under test first on the path, then any connect or name lookup ends
# the process.
NO_NETWORK = """
import os, runpy, sys
sys.path.insert(0, sys.argv[1])
DRIVERS = {"psycopg", "sqlalchemy", "redis", "httpx", "httpcore", "celery", "obstore"}
def _hook(event, args):
    # libpq connects from C, unseen by socket events: so no driver may even be imported.
    driver = event == "import" and args[0].split(".")[0] in DRIVERS
    if driver or event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname"):
        sys.stderr.write(f"NETWORK USED: {event} {args[0]!r}\\n")
        sys.stderr.flush()
        os._exit(97)
sys.addaudithook(_hook)
sys.argv = ["jobwarden", *sys.argv[2:]]
runpy.run_module("jobwarden.cli.main", run_name="__main__")
"""


def _pem(key: Ed25519PrivateKey) -> tuple[str, str]:
    private = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    public = key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    return private, public.decode()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("receipt_keys")
    files: dict[str, Path] = {}
    for name in ("signer", "other"):
        private, public = _pem(Ed25519PrivateKey.generate())
        (folder / f"{name}.pem").write_text(private)
        (folder / f"{name}.pub").write_text(public)
        files[name], files[f"{name}_public"] = folder / f"{name}.pem", folder / f"{name}.pub"
    return files


@pytest.fixture(scope="module")
def providers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped sandbox contract, needing an approval."""
    folder = tmp_path_factory.mktemp("receipt_providers")
    base = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    text = base.replace('name = "sandbox"', f'name = "{PROVIDER}"')
    (folder / f"{PROVIDER}.toml").write_text(
        text.replace("requires_approval = false", "requires_approval = true")
    )
    return folder


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxServer]:
    with SandboxServer(token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def provider_env(providers: Path, sandbox: SandboxServer) -> dict[str, str]:
    return {
        "JOBWARDEN_PROVIDERS_DIR": str(providers),
        "JOBWARDEN_SANDBOX_URL": sandbox.url,
        "JOBWARDEN_SANDBOX_TOKEN": TOKEN,
    }


@pytest.fixture(scope="module")
def rt(provider_env: dict[str, str]) -> Iterator[Runtime]:
    with pytest.MonkeyPatch.context() as mp:
        for name, value in provider_env.items():
            mp.setenv(name, value)
        built = build_runtime(Settings())
        yield built
        close_runtime(built)
        runtime_module.reset()


@pytest.fixture(scope="module")
def tenant() -> str:
    return tenant_name()


@pytest.fixture(scope="module")
def succeeded(rt: Runtime, database_url: str, tenant: str) -> uuid.UUID:
    """An operation submitted by alice, approved by bob, created, polled, collected."""
    made = submit_request(
        SubmissionRequest(
            tenant=tenant,
            requested_by="alice",
            provider=PROVIDER,
            command={"kind": "export", "behaviour": {"polls_to_finish": 1}},
            idempotency_key=f"receipt-{uuid.uuid4().hex}",
        ),
        door="python",
        runtime=rt,
    )
    assert made.operation_id is not None
    op_id = uuid.UUID(made.operation_id)
    approve(str(op_id), load(database_url, op_id).request_fingerprint, "bob", runtime=rt)
    op = load(database_url, op_id)
    for _ in range(MAX_STEPS):
        step = next((s for s in STEPS if op.state in s.states), None)
        if op.state is S.succeeded or step is None:
            break
        _due_now(database_url, op_id)
        op, _ = run(rt, load(database_url, op_id), step)
    assert op.state is S.succeeded, (op.state, op.escalation_detail)
    return op_id


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobwarden.cli.main", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _offline_env() -> dict[str, str]:
    """No JOBWARDEN_* setting (no database, Redis, broker, key); only what Python needs."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "SYSTEMROOT")
    return {name: os.environ[name] for name in keep if name in os.environ}


def _unshare_n() -> list[str]:
    """`unshare -n` (no network at all) where this machine allows it, else nothing."""
    found = shutil.which("unshare")
    if found is None:
        return []
    probe = subprocess.run([found, "-n", "true"], capture_output=True, timeout=10, check=False)
    return [found, "-n"] if probe.returncode == 0 else []


def _verify_offline(receipt: Path, public_key: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *_unshare_n(),
            *(sys.executable, "-I", "-c", NO_NETWORK, str(REPO)),
            *("receipt", "verify", str(receipt), "--public-key", str(public_key)),
        ],
        cwd=REPO,
        env=_offline_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def receipt_file(
    succeeded: uuid.UUID,
    keys: dict[str, Path],
    provider_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    out = tmp_path_factory.mktemp("receipts") / "receipt.json"
    env = {
        **os.environ,
        **provider_env,
        "JOBWARDEN_RECEIPT_SIGNING_KEY_FILE": str(keys["signer"]),
    }
    written = _cli("receipt", str(succeeded), "--out", str(out), env=env)
    assert written.returncode == 0, written.stderr
    assert f"receipt written: {out}" in written.stdout
    return out


def test_a_receipt_written_by_the_cli_verifies_offline_in_a_process_without_settings(
    receipt_file: Path, keys: dict[str, Path], succeeded: uuid.UUID
) -> None:
    document = json.loads(receipt_file.read_text())
    facts = document["facts"]
    assert facts["operation_id"] == str(succeeded) and facts["final_state"] == "succeeded"
    assert [a["by"] for a in facts["approvals"]] == ["human:bob"]
    assert facts["provider_token"] == f"jw-{succeeded.hex}"
    assert facts["result"]["sha256"] and facts["result"]["record_count"] == 10
    assert facts["create_request"]["request_digest"] == facts["approvals"][0]["request_digest"]
    assert TOKEN not in receipt_file.read_text()  # the credential is redacted
    assert [o["kind"] for o in facts["observations"]] == ["create_accepted", "observed"]

    verified = _verify_offline(receipt_file, keys["signer_public"])
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.strip() == (
        f"receipt verified: operation {succeeded}, {len(document['events'])} events, "
        "state succeeded"
    )


def _edit_event(doc: dict[str, Any]) -> None:
    doc["events"][4]["fields"]["excerpt"]["remote_state"] = "failed"


def _remove_event(doc: dict[str, Any]) -> None:
    del doc["events"][2]


def _reorder_pair(doc: dict[str, Any]) -> None:
    events = doc["events"]
    events[3], events[4] = events[4], events[3]


def _edit_result_digest(doc: dict[str, Any]) -> None:
    doc["facts"]["result"]["sha256"] = "0" * 64


def _edit_approver(doc: dict[str, Any]) -> None:
    doc["facts"]["approvals"][0]["by"] = "human:mallory"


TAMPERS: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (_edit_event, "event 5: hash does not match contents"),
    (_remove_event, "event 4: expected seq 3"),
    (_reorder_pair, "event 5: expected seq 4"),
    (_edit_result_digest, "fact result.sha256: does not agree"),
    (_edit_approver, "fact approvals[0].by: does not agree"),
]


@pytest.mark.parametrize(("tamper", "named"), TAMPERS, ids=[t.__name__ for t, _ in TAMPERS])
def test_every_tamper_of_a_real_receipt_is_detected_and_named(
    receipt_file: Path,
    keys: dict[str, Path],
    tamper: Callable[[dict[str, Any]], None],
    named: str,
) -> None:
    document = json.loads(receipt_file.read_text())
    key = load_pem_public_key(keys["signer_public"].read_bytes())
    assert isinstance(key, type(Ed25519PrivateKey.generate().public_key()))
    tampered = copy.deepcopy(document)
    tamper(tampered)
    lines = [p.line() for p in verify_receipt(tampered, key)]
    assert lines[0].startswith("signature: does not verify"), lines
    assert lines[1].startswith(named), lines
    # Re-signed by whoever tampered: the signature is another key's, the tamper still named.
    other = Ed25519PrivateKey.generate()
    again = [p.line() for p in verify_receipt(signed(tampered, other), other.public_key())]
    assert again and again[0].startswith(named), again


def test_the_offline_verifier_names_the_edited_event_and_a_signature_of_another_key(
    receipt_file: Path, keys: dict[str, Path], tmp_path: Path
) -> None:
    document = json.loads(receipt_file.read_text())
    edited = copy.deepcopy(document)
    _edit_event(edited)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(edited))
    refused = _verify_offline(path, keys["signer_public"])
    assert refused.returncode == 1
    assert "event 5: hash does not match contents" in refused.stderr.splitlines()
    assert "Traceback" not in refused.stderr

    other = Ed25519PrivateKey.generate()
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(signed(document, other)))
    refused = _verify_offline(forged, keys["signer_public"])
    assert refused.returncode == 1
    assert refused.stderr.startswith("signature: does not verify with this public key (signed by")
    assert len(refused.stderr.splitlines()) == 1  # nothing else was altered


def test_the_cli_without_a_signing_key_says_which_variable_in_one_line(
    succeeded: uuid.UUID, provider_env: dict[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if "RECEIPT" not in k}
    refused = _cli("receipt", str(succeeded), "--out", str(tmp_path / "r.json"), env=env)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "JOBWARDEN_RECEIPT_SIGNING_KEY_FILE is not set: receipts need an Ed25519 signing key"
    )


@pytest.fixture(scope="module")
def api(database_url: str, keys: dict[str, Path], provider_env: dict[str, str]) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as mp:
        for name, value in provider_env.items():
            mp.setenv(name, value)
        settings = Settings(receipt_signing_key=SecretStr(keys["signer"].read_text()))
        with serving(create_app(settings)) as url:
            yield url


def test_the_api_serves_the_receipt_to_its_tenant_and_the_key_to_anyone(
    api: str, database_url: str, succeeded: uuid.UUID, tenant: str
) -> None:
    mine = make_token(database_url, tenant, "reader", ["read"])
    theirs = make_token(database_url, tenant_name(), "reader", ["read"])
    with httpx.Client(base_url=api, timeout=30) as client:
        answer = client.get(f"/v1/operations/{succeeded}/receipt", headers=mine)
        foreign = client.get(f"/v1/operations/{succeeded}/receipt", headers=theirs)
        anonymous = client.get(f"/v1/operations/{succeeded}/receipt")
        key = client.get(KEY_PATH)
    assert answer.status_code == 200, answer.text
    assert foreign.status_code == 404
    assert foreign.headers["content-type"] == "application/problem+json"
    assert anonymous.status_code == 401
    assert key.status_code == 200 and key.headers["content-type"] == "application/x-pem-file"
    public = load_pem_public_key(key.content)
    assert isinstance(public, type(Ed25519PrivateKey.generate().public_key()))
    assert verify_receipt(answer.json(), public) == []


def test_the_mcp_tool_returns_the_receipt_of_an_operation_the_caller_may_see(
    database_url: str,
    succeeded: uuid.UUID,
    tenant: str,
    keys: dict[str, Path],
    provider_env: dict[str, str],
) -> None:
    from tests.integration.test_mcp_door import _token

    signing_key = SecretStr(keys["signer"].read_text())
    settings = Settings(database_url=database_url, receipt_signing_key=signing_key)
    mine, theirs = _token(database_url, tenant), _token(database_url, tenant_name())

    async def calls() -> tuple[Any, str]:
        args = {"operation_id": str(succeeded)}
        async with Client(build_server(settings, stdio_token=mine)) as client:
            own = await client.call_tool("get_operation_receipt", args)
        async with Client(build_server(settings, stdio_token=theirs)) as client:
            foreign = await client.call_tool("get_operation_receipt", args)
        assert foreign.is_error
        text = " ".join(c.text for c in foreign.content if isinstance(c, TextContent))
        assert not own.is_error, own.content
        return own.structured_content, text

    with pytest.MonkeyPatch.context() as mp:
        for name, value in provider_env.items():
            mp.setenv(name, value)
        document, refused = anyio.run(calls)
    public = load_pem_public_key(keys["signer_public"].read_bytes())
    assert isinstance(public, type(Ed25519PrivateKey.generate().public_key()))
    assert isinstance(document, dict)
    assert verify_receipt(document, public) == []
    assert f"not_found: operation_id '{succeeded}': no such operation" in refused
