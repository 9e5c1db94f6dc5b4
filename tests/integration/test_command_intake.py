"""Commands validated per provider before they are fingerprinted, against the real database:
two spellings of one intent are one operation (the second answers replayed, not conflict)
through the Python call and the Celery intake alike; the stored command is the validated
one; a command the schema refuses records nothing. Uses the shipped sandbox_export contract.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from jobwarden.config.settings import get_settings
from jobwarden.models.errors import InvalidCommandError
from jobwarden.models.intake.fingerprint import request_fingerprint
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import EventRow, OperationRow
from jobwarden.tasks.intake import SubmitOutcome, submit_from_message, submit_operation
from jobwarden.tasks.provider.edge import shown_create_request
from jobwarden.tasks.runtime import Runtime, build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from tests.integration.test_cli import _cli

QUEUE_SUFFIX = "command-schema"
IMAGE = "registry.example.com/team/exporter@sha256:" + "0123456789abcdef" * 4
MINIMAL: dict[str, Any] = {
    "dataset": "orders",
    "image": IMAGE,
    "spend_cap": {"amount": 1050, "currency": "EUR"},
}
# The same intent: fields in another order and every default written out.
SPELLED_OUT: dict[str, Any] = {
    "spend_cap": {"currency": "EUR", "amount": 1050},
    "output": {"compression": "none", "format": "jsonl"},
    "kind": "export",
    "image": IMAGE,
    "dataset": "orders",
}
VALIDATED: dict[str, Any] = {
    **MINIMAL,
    "kind": "export",
    "output": {"format": "jsonl", "compression": "none"},
}


@pytest.fixture(scope="module")
def runtime(database_url: str) -> Iterator[Runtime]:
    """The run's runtime, publishing wake-ups to a queue of its own that is purged afterwards."""
    base = get_settings()
    rt = build_runtime(base.model_copy(update={"queue": f"{base.queue}-{QUEUE_SUFFIX}"}))
    assert "sandbox_export" in rt.contracts
    yield rt
    for key in rt.redis.scan_iter(f"{base.key_prefix}:celery:*{QUEUE_SUFFIX}*"):
        rt.redis.delete(key)
    rt.redis.close()
    close_runtime(rt)


def _request(tenant: str, key: str, command: dict[str, Any]) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "provider": "sandbox_export",
        "idempotency_key": key,
        "command": command,
        "requested_by": "pytest",
    }


def _rows(database_url: str, tenant: str) -> tuple[list[OperationRow], int]:
    with transaction(database_url) as session:
        rows = list(session.scalars(select(OperationRow).where(OperationRow.tenant == tenant)))
        for row in rows:
            session.expunge(row)
        events = len(
            list(
                session.scalars(
                    select(EventRow.seq)
                    .join(OperationRow, OperationRow.operation_id == EventRow.operation_id)
                    .where(OperationRow.tenant == tenant)
                )
            )
        )
    return rows, events


def test_two_spellings_of_one_intent_replay_rather_than_conflict(
    database_url: str, runtime: Runtime
) -> None:
    tenant, key = f"cs-{secrets.token_hex(6)}", secrets.token_hex(8)
    first = submit_operation(**_request(tenant, key, MINIMAL), runtime=runtime)
    second = submit_operation(**_request(tenant, key, SPELLED_OUT), runtime=runtime)
    assert first.outcome is SubmitOutcome.created
    assert (second.outcome, second.operation_id) == (SubmitOutcome.replayed, first.operation_id)
    assert second.fingerprint == first.fingerprint
    # The fingerprint is over the validated command, not over either spelling.
    assert first.fingerprint == request_fingerprint(
        method="POST",
        route="/providers/sandbox_export/operations",
        tenant=tenant,
        provider="sandbox_export",
        command=VALIDATED,
    )
    rows, _ = _rows(database_url, tenant)
    assert [row.command for row in rows] == [VALIDATED]  # what is stored is what is sent


def test_the_celery_intake_replays_the_other_spelling_of_a_python_submission(
    database_url: str, runtime: Runtime
) -> None:
    tenant, key = f"cs-{secrets.token_hex(6)}", secrets.token_hex(8)
    first = submit_operation(**_request(tenant, key, SPELLED_OUT), runtime=runtime)
    answer = submit_from_message(_request(tenant, key, MINIMAL))
    assert answer["outcome"] == "replayed"
    assert (answer["operation_id"], answer["fingerprint"]) == (
        first.operation_id,
        first.fingerprint,
    )
    assert len(_rows(database_url, tenant)[0]) == 1


def test_a_changed_amount_is_still_a_conflict(database_url: str, runtime: Runtime) -> None:
    tenant, key = f"cs-{secrets.token_hex(6)}", secrets.token_hex(8)
    submit_operation(**_request(tenant, key, MINIMAL), runtime=runtime)
    changed = {**MINIMAL, "spend_cap": {"amount": 1051, "currency": "EUR"}}
    answer = submit_operation(**_request(tenant, key, changed), runtime=runtime)
    assert answer.outcome is SubmitOutcome.conflict
    rows, _ = _rows(database_url, tenant)
    assert [row.command for row in rows] == [VALIDATED]


@pytest.mark.parametrize(
    ("command", "message", "path"),
    [
        (
            {**MINIMAL, "spend_cap": {"amount": 10.10, "currency": "EUR"}},
            "command.spend_cap.amount: 10.1 is not of type 'integer'",
            ("spend_cap", "amount"),
        ),
        ({**MINIMAL, "priority": "high"}, "command.priority: unknown field", ("priority",)),
        (
            {**MINIMAL, "image": "registry.example.com/team/exporter:latest"},
            "command.image: 'registry.example.com/team/exporter:latest' is not an immutable "
            "reference: oci_digest must be an OCI digest",
            ("image",),
        ),
    ],
)
def test_a_command_the_schema_refuses_records_nothing_through_either_door(
    database_url: str,
    runtime: Runtime,
    command: dict[str, Any],
    message: str,
    path: tuple[str, ...],
) -> None:
    tenant = f"cs-{secrets.token_hex(6)}"
    with pytest.raises(InvalidCommandError) as caught:
        submit_operation(**_request(tenant, secrets.token_hex(8), command), runtime=runtime)
    assert str(caught.value).startswith(message)
    assert caught.value.path == path
    answer = submit_from_message(_request(tenant, secrets.token_hex(8), command))
    assert answer["outcome"] == "invalid"
    assert answer["error"].startswith(message)
    assert _rows(database_url, tenant) == ([], 0)


def test_the_cli_door_prints_the_failing_path_on_one_line_and_exits_2(
    database_url: str,
) -> None:
    command = {**MINIMAL, "spend_cap": {"amount": 10.5, "currency": "EUR"}}
    done = _cli("submit", "sandbox_export", json.dumps(command), "--key", secrets.token_hex(8))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: command.spend_cap.amount: 10.5 is not of type 'integer'"
    ]


def test_the_pinned_image_digest_is_shown_to_the_approver_as_a_reference(
    database_url: str, runtime: Runtime
) -> None:
    tenant = f"cs-{secrets.token_hex(6)}"
    answer = submit_operation(**_request(tenant, secrets.token_hex(8), MINIMAL), runtime=runtime)
    with transaction(database_url) as session:
        op = store.load(session, uuid.UUID(answer.operation_id))
    assert op is not None
    shown = shown_create_request(runtime.context_for(op), op)
    assert [(r.pointer, r.value, r.kind.value) for r in shown.references] == [
        ("/command/image", IMAGE, "oci_digest")
    ]
