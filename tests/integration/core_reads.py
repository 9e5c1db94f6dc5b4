"""Every CLI command that reads, and operations to read: what the core install must run
(issue 36: `jobwarden list` imported the HTTP door's cursor, and FastAPI with it)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from jobwarden.models.persistence import query_store
from jobwarden.models.persistence.query_store import encode_cursor
from jobwarden.models.states import OperationState as S
from tests.integration.api_helpers import NOW, insert_operation, tenant_name
from tests.integration.result_helpers import operation_with_result

# Each with placeholders read_target fills; every one exits 0.
READS: list[list[str]] = [
    ["list", "--tenant", "{tenant}"],
    ["list", "--tenant", "{tenant}", "--limit", "1", "--cursor", "{cursor}"],
    ["show", "{op}"],
    ["history", "{op}"],
    ["watch", "{op}"],
    ["verify", "{stopped}"],
    ["result", "{op}", "-o", "{out}"],
    ["schedules", "list"],
    ["tokens", "list"],
]


def read_target(database_url: str, folder: Path) -> dict[str, str]:
    """A succeeded operation with its stored result, a cancelled one (its history whole), a
    cursor into their list and where the result is to be written."""
    tenant = tenant_name()
    op, _ = operation_with_result(database_url, tenant, b"the result's bytes\n")
    stopped = insert_operation(database_url, tenant, S.cancelled)
    first = query_store.Position(at=NOW - timedelta(days=1), operation_id=op)
    return {
        "tenant": tenant,
        "op": str(op),
        "stopped": str(stopped),
        "cursor": encode_cursor(first),
        "out": str(folder / "result.bin"),
    }


def filled(args: list[str], target: dict[str, str]) -> list[str]:
    return [arg.format(**target) for arg in args]
