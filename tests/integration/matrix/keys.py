"""Keys jobwarden derives are its own (DESIGN.md invariant 17): a resubmit key
(``resubmit:<id>``) or a schedule slot's key (``schedule:<name>:<slot>``) is refused
through every door that takes a caller's key, and a planted one is never adopted.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from jobwarden.models.errors import RefusedInputError
from jobwarden.models.schedules.slots import rfc3339
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.intake import submit_from_message, submit_operation
from jobwarden.tasks.schedules import tick_once
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import (
    COMMAND,
    Doors,
    as_message,
    tool_error,
)


def reserved_keys() -> list[str]:
    """A resubmit key of a real-looking operation and a schedule slot's key."""
    return [f"resubmit:{uuid.uuid4()}", f"schedule:x-{secrets.token_hex(2)}:2026-01-01T00:00:00Z"]


def _nothing_under(d: Doors, tenant: str, keys: list[str]) -> None:
    assert [k for k in keys if d.find(tenant, k) is not None] == []


def python(d: Doors) -> None:
    tenant, keys = tenant_name(), reserved_keys()
    for key in keys:
        with pytest.raises(RefusedInputError, match="idempotency_key"):
            submit_operation(
                tenant=tenant,
                provider="sandbox",
                idempotency_key=key,
                command=COMMAND,
                requested_by="svc",
                runtime=d.rt,
            )
    _nothing_under(d, tenant, keys)


def celery(d: Doors) -> None:
    tenant, keys = tenant_name(), reserved_keys()
    for key in keys:
        fields: dict[str, Any] = {"tenant": tenant, "provider": "sandbox", "requested_by": "s"}
        fields["command"] = COMMAND
        answer = submit_from_message(as_message({**fields, "idempotency_key": key}))
        assert answer["outcome"] == "invalid" and "idempotency_key" in answer["error"], answer
    _nothing_under(d, tenant, keys)


def http(d: Doors) -> None:
    tenant, keys = tenant_name(), reserved_keys()
    with d.http(d.token(tenant, "svc")) as client:
        for key in keys:
            answer = client.post(
                "/v1/operations",
                json={"provider": "sandbox", "command": COMMAND},
                headers={"Idempotency-Key": key},
            )
            assert answer.status_code == 422, answer.text
            assert "idempotency-key" in answer.text.lower(), answer.text
    _nothing_under(d, tenant, keys)


def mcp(d: Doors) -> None:
    tenant, keys = tenant_name(), reserved_keys()
    start = {"provider": "sandbox", "command": COMMAND}
    answers = d.mcp(
        d.token(tenant, "agent"),
        *[("start_operation", {**start, "operation_key": key}) for key in keys],
    )
    for answer in answers:
        assert "operation_key" in tool_error(answer)
    _nothing_under(d, tenant, keys)


def cli(d: Doors) -> None:
    tenant, keys = tenant_name(), reserved_keys()
    for key in keys:
        done = d.cli("submit", "sandbox", '{"kind": "export"}', "--key", key, "--tenant", tenant)
        assert done.returncode == 2, done.stdout
        assert "Traceback" not in done.stderr and "key" in done.stderr, done.stderr
    _nothing_under(d, tenant, keys)


def schedules(d: Doors) -> None:
    tenant, name = tenant_name(), f"hourly-{secrets.token_hex(3)}"
    table = {"interval_seconds": 60, "provider": "sandbox", "command": {"at": "{slot}"}}
    with d.http(d.token(tenant, "alice")) as client:
        assert client.put(f"/v1/schedules/{name}", json=table).status_code == 201
        view = client.get(f"/v1/schedules/{name}").json()
    slot = datetime.fromisoformat(view["next_slot_at"])
    key = f"schedule:{name}:{rfc3339(slot)}"
    # Someone who guesses the next slot's key first does not own the slot.
    with pytest.raises(RefusedInputError, match="idempotency_key"):
        submit_operation(
            tenant=tenant,
            provider="sandbox",
            idempotency_key=key,
            command={"planted": True},
            requested_by="mallory",
            runtime=d.rt,
        )
    tick_once(d.rt, clock=lambda: slot + timedelta(seconds=1))
    fired = d.find(tenant, key)
    assert fired is not None and fired.command == {"at": rfc3339(slot)}, fired
    # The guess is on the record as refused; the slot's operation is the schedule's own.
    assert [(e.outcome, e.actor) for e in d.intake(tenant, key)] == [
        ("invalid", "submitter:mallory"),
        ("created", f"schedule:{name}"),
    ]


def resubmit(d: Doors) -> None:
    tenant = tenant_name()
    old = insert_operation(d.url, tenant, S.failed)
    # Planted before intake refused the namespace (or by a door that let it through).
    planted = insert_operation(
        d.url, tenant, S.create_pending, idempotency_key=f"resubmit:{old}", command={"x": 1}
    )
    with d.http(d.token(tenant, "oncall")) as client:
        answer = client.post(
            f"/v1/operations/{old}/decisions", json={"option": "resubmit", "note": "fixed"}
        )
    assert answer.status_code < 500, answer.text
    assert answer.json().get("resubmitted_as") != str(planted)
    assert d.load(old).resubmitted_as != planted
