"""Every door of jobwarden, opened for one test module: the matrix's cells knock through it.

One ``Doors`` holds the scratch database, a runtime and the HTTP API (console and webhook
receiver included) on a real uvicorn server, all with the matrix's own contracts: the
shipped sandbox, one that needs one approval, one that needs two (the two-person rule)
and one that receives signed webhooks. MCP is the in-process SDK client of the real
server; the CLI is the ``jobwarden`` command's main() run in this process
(tests/cli_runner.py: the environment a process would have); Celery's door is the
intake task's function given a message as the broker carries it (JSON), since no
worker runs in integration tests.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp import Client
from mcp_types import CallToolResult, TextContent
from sqlalchemy import select

from jobwarden.api.auth import new_token, secret_hash
from jobwarden.config.settings import Settings
from jobwarden.demo.harness import REPO
from jobwarden.mcp.server import build_server
from jobwarden.models.history.chain import ChainedEvent
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import api_store, store
from jobwarden.models.persistence.api_store import IntakeEntry
from jobwarden.models.persistence.api_tables import IntakeLogRow
from jobwarden.models.persistence.db import transaction
from jobwarden.tasks.runtime import Runtime, utcnow
from tests.cli_runner import CliResult, run_cli

ONE = "matrix_one"  # requires_approval = true: one approver other than the submitter
TWO = "matrix_two"  # approvals_required = 2: the two-person rule
HOOKS = "matrix_hooks"  # signed webhooks (HMAC)
OTHER_HOOKS = "matrix_other_hooks"  # another provider's webhooks, another secret
MOVING = "matrix_moving"  # a contract one cell edits, to move an operation to it
DEPLOY = "matrix_deploy"  # approved; its command names immutable references (issue 40)
HOOKS_SECRET_ENV = "JOBWARDEN_MATRIX_HOOKS_SECRET"
OTHER_SECRET_ENV = "JOBWARDEN_MATRIX_OTHER_HOOKS_SECRET"
SECRETS = {HOOKS: "matrix-hooks-secret", OTHER_HOOKS: "matrix-other-hooks-secret"}
ALL = ("submit", "read", "cancel", "approve", "decide")
COMMAND: dict[str, Any] = {"kind": "export", "behaviour": {"polls_to_finish": 1}}
WAIT = 30.0


def _webhook_table(secret_env: str) -> str:
    return (
        '[webhook]\nscheme = "hmac"\nsignature_header = "X-Sandbox-Signature"\n'
        'timestamp_header = "X-Sandbox-Timestamp"\nevent_id_pointer = "/id"\n'
        f'job_id_pointer = "/job/id"\nsecret_env = "{secret_env}"\ntolerance_seconds = 300\n'
    )


# A deploy's command: the commit and every image must be immutable references, nested
# and in an array (models/contracts/references.py).
DEPLOY_SCHEMA = """
[command.schema]
type = "object"
[command.schema.properties.deploy]
type = "object"
required = ["commit"]
[command.schema.properties.deploy.properties.commit]
type = "string"
"x-jobwarden-immutable-reference" = "git_commit"
[command.schema.properties.deploy.properties.images]
type = "array"
[command.schema.properties.deploy.properties.images.items]
type = "string"
"x-jobwarden-immutable-reference" = "oci_digest"
"""


def write_providers(folder: Path) -> Path:
    """The matrix's contracts, each a copy of the shipped sandbox with one change."""
    base = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    variants = {
        "sandbox": base,
        ONE: base.replace("requires_approval = false", "requires_approval = true"),
        MOVING: base,
        DEPLOY: base.replace("requires_approval = false", "requires_approval = true").replace(
            "[poll]", DEPLOY_SCHEMA + "\n[poll]", 1
        ),
        TWO: base.replace("requires_approval = false", "approvals_required = 2"),
        HOOKS: base.replace("[poll]", _webhook_table(HOOKS_SECRET_ENV) + "\n[poll]", 1),
        OTHER_HOOKS: base.replace("[poll]", _webhook_table(OTHER_SECRET_ENV) + "\n[poll]", 1),
    }
    for name, text in variants.items():
        (folder / f"{name}.toml").write_text(text.replace('name = "sandbox"', f'name = "{name}"'))
    # The follow-up door's (issue 40): the payments and deploy shapes as shipped.
    shipped = REPO / "config" / "providers"
    for name in (
        "sandbox_payments",
        "sandbox_capture",
        "sandbox_refund",
        "sandbox_deploy",
        "sandbox_rollback",
    ):
        for file in (f"{name}.toml", f"{name}.command.schema.json"):
            (folder / file).write_text((shipped / file).read_text())
    return folder


class LogLines(logging.Handler):
    """Every record jobwarden's and uvicorn's loggers write while it is installed."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def errors(self) -> list[str]:
        """Lines a stranger's input must never cause: errors, tracebacks, unexpected errors."""
        return [
            r.getMessage()
            for r in self.records
            if r.levelno >= logging.ERROR or r.exc_info or "api_unexpected_error" in r.getMessage()
        ]


@contextmanager
def watching_logs() -> Iterator[LogLines]:
    lines = LogLines()
    loggers = [logging.getLogger(n) for n in ("", "jobwarden", "uvicorn", "uvicorn.error")]
    for logger in loggers:
        logger.addHandler(lines)
    try:
        yield lines
    finally:
        for logger in loggers:
            logger.removeHandler(lines)


@dataclass
class Doors:
    url: str
    rt: Runtime
    api: str
    providers: Path
    tokens: dict[str, uuid.UUID] = field(default_factory=dict)

    # -- credentials -------------------------------------------------------------------
    def token(self, tenant: str, name: str, scopes: tuple[str, ...] = ALL) -> str:
        """A new live token of ``tenant`` named ``name``; its id is kept in ``tokens``."""
        secret, token_id = new_token(), uuid.uuid4()
        with transaction(self.url) as session:
            api_store.insert_token(
                session,
                token_id=token_id,
                tenant=tenant,
                name=name,
                secret_hash=secret_hash(secret),
                scopes=list(scopes),
                now=utcnow(),
            )
        self.tokens[secret] = token_id
        return secret

    # -- HTTP and the console -----------------------------------------------------------
    @contextmanager
    def http(self, secret: str | None = None) -> Iterator[httpx.Client]:
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        with httpx.Client(base_url=self.api, headers=headers, timeout=WAIT) as client:
            yield client

    @contextmanager
    def console(self, secret: str) -> Iterator[httpx.Client]:
        """A client holding a console session for the token ``secret``."""
        with httpx.Client(base_url=self.api, timeout=WAIT) as client:
            form = client.get("/console/login")
            answer = client.post("/console/login", data={"csrf": csrf(form.text), "token": secret})
            assert answer.status_code == 303, answer.text
            yield client

    # -- MCP ---------------------------------------------------------------------------
    def mcp(self, secret: str, *calls: tuple[str, dict[str, Any]]) -> list[CallToolResult]:
        """Each tool call's result, through the real MCP server's SDK client."""
        settings = Settings(database_url=self.url, providers_dir=self.providers)

        async def session() -> list[CallToolResult]:
            with anyio.fail_after(WAIT):
                async with Client(build_server(settings, stdio_token=secret)) as client:
                    return [await client.call_tool(name, args) for name, args in calls]

        return anyio.run(session)

    # -- the CLI -------------------------------------------------------------------------
    def cli(self, *args: str, env: dict[str, str] | None = None) -> CliResult:
        """``jobwarden ARGS`` as an operator runs it, against this run's servers: in this
        process (tests/cli_runner.py; the CLI's own tests start real ones)."""
        return run_cli(*args, env={"JOBWARDEN_PROVIDERS_DIR": str(self.providers), **(env or {})})

    # -- what the database says --------------------------------------------------------
    def load(self, op: uuid.UUID | str) -> Operation:
        with transaction(self.url) as session:
            row = store.load(session, uuid.UUID(str(op)))
        assert row is not None, f"no operation {op}"
        return row

    def events(self, op: uuid.UUID | str) -> list[ChainedEvent]:
        with transaction(self.url) as session:
            return list(store.events_for(session, uuid.UUID(str(op))))

    def intake(self, tenant: str, key: str) -> list[IntakeEntry]:
        with transaction(self.url) as session:
            return list(api_store.intake_for_key(session, tenant, key))

    def intake_of_tenant(self, tenant: str) -> list[IntakeLogRow]:
        """Every intake-log row of ``tenant``, oldest first."""
        with transaction(self.url) as session:
            rows = session.scalars(
                select(IntakeLogRow)
                .where(IntakeLogRow.tenant == tenant)
                .order_by(IntakeLogRow.entry_id)
            )
            return list(rows)

    def find(self, tenant: str, key: str) -> Operation | None:
        with transaction(self.url) as session:
            return store.find_by_key(session, tenant, key)


CellFunction = Callable[["Doors"], None]


def undelivered(missing: str) -> Callable[[CellFunction], CellFunction]:
    """Mark a cell whose promise is not delivered yet: the matrix runs it as a strict
    xfail naming ``missing`` (FAIL* in the grid), so it fails the run once it passes."""

    def mark(cell: CellFunction) -> CellFunction:
        cell.undelivered = missing  # type: ignore[attr-defined]
        return cell

    return mark


def csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


def tool_answer(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def tool_error(result: CallToolResult) -> str:
    """A tool's refusal text; it never shows a traceback."""
    assert result.is_error, result.structured_content
    text = " ".join(c.text for c in result.content if isinstance(c, TextContent))
    assert "Traceback" not in text, text
    return text


def as_message(fields: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments as a Celery message carries them: JSON there and back."""
    loaded: dict[str, Any] = json.loads(json.dumps(fields))
    return loaded
