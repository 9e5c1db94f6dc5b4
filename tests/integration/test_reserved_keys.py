"""Issue 33, finding 4 (invariant 17): keys jobwarden derives cannot be planted.

Every door refuses an idempotency key in a reserved namespace (models/intake/reserved_keys.py)
naming the field, and records the refusal in the intake log; a resubmission refuses to
adopt an operation under its key that is not linked to the original (one planted before
the rule); `jobwarden keys check` lists such keys with who planted them, and passes the
ones jobwarden derived itself (a resubmission, a schedule's slot).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import delete

from jobwarden.api.app import create_app
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.intake.reserved_keys import ReservedKeyError
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.schedule_tables import ScheduleRow
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.humans.interventions import decide_escalation
from jobwarden.tasks.intake import submit_from_message, submit_operation
from jobwarden.tasks.runtime import current
from tests.api_server import serving
from tests.integration.api_helpers import insert_operation, load, make_token, tenant_name
from tests.integration.test_cli import _cli
from tests.integration.test_mcp_door import COMMAND, _error, _in_process, _token

TYPE = "tag:jobwarden.dev,2026:problem/"
PLANTED = ["resubmit:0b5e1c4e-0000-4000-8000-000000000000", "schedule:nightly:2030-01-01T00:00:00Z"]
PLANTED += ["Follow-Up:capture", "jobwarden:anything"]


@pytest.fixture(scope="module")
def base_url(database_url: str) -> Iterator[str]:
    with serving(create_app()) as url:
        yield url


def _refusals(database_url: str, tenant: str, key: str) -> list[tuple[str, str]]:
    with transaction(database_url) as session:
        return [(e.door, e.outcome) for e in api_store.intake_for_key(session, tenant, key)]


@pytest.mark.parametrize("key", PLANTED)
def test_the_python_and_celery_doors_refuse_a_reserved_key_naming_the_field(
    database_url: str, key: str
) -> None:
    tenant = tenant_name()
    fields: dict[str, Any] = {"tenant": tenant, "requested_by": "svc", "provider": "sandbox"}
    fields["command"] = {}
    with pytest.raises(ReservedKeyError, match=r"^idempotency_key must not start with"):
        submit_operation(**fields, idempotency_key=key)
    answer = submit_from_message({**fields, "idempotency_key": key})
    assert answer["outcome"] == "invalid"
    assert answer["error"].startswith("idempotency_key must not start with")
    assert "reserved for keys jobwarden derives" in answer["error"]
    assert _refusals(database_url, tenant, key) == [("python", "invalid"), ("celery", "invalid")]
    # The one way in, derived_key, is no keyword of a door: neither call records anything.
    with pytest.raises(TypeError, match="derived_key"):
        submit_operation(**fields, idempotency_key=key, derived_key=True)
    smuggled = submit_from_message({**fields, "idempotency_key": key, "derived_key": True})
    assert smuggled == {"outcome": "invalid", "error": "unknown keyword arguments: derived_key"}
    assert len(_refusals(database_url, tenant, key)) == 2


@pytest.mark.parametrize("key", PLANTED)
def test_the_http_door_refuses_a_reserved_key_with_a_422_naming_the_header(
    database_url: str, base_url: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    tenant = tenant_name()
    headers = make_token(database_url, tenant, "svc", ["submit"])
    with caplog.at_level(logging.INFO):
        answer = httpx.post(
            f"{base_url}/v1/operations",
            json={"provider": "sandbox", "command": {"polls_to_finish": 1}},
            headers={**headers, "Idempotency-Key": key},
            timeout=30,
        )
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["type"] == TYPE + "invalid_submission"
    assert problem["detail"].startswith("Idempotency-Key must not start with")
    assert problem["errors"][0]["path"] == "header/Idempotency-Key"
    assert "api_unexpected_error" not in caplog.text
    assert _refusals(database_url, tenant, key) == [("http", "invalid")]


def test_the_mcp_and_cli_doors_refuse_a_reserved_key_naming_their_field(
    database_url: str,
) -> None:
    tenant = tenant_name()
    key = PLANTED[1]

    async def start() -> str:
        async with _in_process(database_url, _token(database_url, tenant)) as client:
            arguments = {"operation_key": key, "provider": "sandbox", "command": COMMAND}
            return _error(await client.call_tool("start_operation", arguments))

    text = anyio.run(start)
    assert "invalid_submission: operation_key must not start with 'schedule:'" in text
    done = _cli("submit", "sandbox", "{}", "--key", key, "--tenant", tenant)
    assert done.returncode == 2, done.stdout
    assert done.stderr.startswith("error: idempotency_key must not start with 'schedule:'")
    assert "Traceback" not in done.stderr
    assert _refusals(database_url, tenant, key) == [("mcp", "invalid"), ("python", "invalid")]


def test_a_resubmission_never_adopts_an_operation_planted_under_its_key(
    database_url: str,
) -> None:
    tenant = tenant_name()
    old = insert_operation(database_url, tenant, S.failed)
    # Planted before intake refused reserved keys: same key, another command, no link.
    planted = insert_operation(
        database_url,
        tenant,
        S.create_pending,
        idempotency_key=f"resubmit:{old}",
        command={"polls_to_finish": 1, "to": "mallory"},
    )
    with pytest.raises(RefusedInputError, match="refusing to adopt it"):
        decide_escalation(str(old), "resubmit", "alice", "provider fixed")
    assert load(database_url, old).resubmitted_as is None
    assert load(database_url, planted).resubmit_of is None


@pytest.fixture
def tenant(database_url: str) -> Iterator[str]:
    name = tenant_name()
    yield name
    with transaction(database_url) as session:
        session.execute(delete(ScheduleRow).where(ScheduleRow.tenant == name))


def test_keys_check_lists_planted_keys_with_their_door_and_passes_derived_ones(
    database_url: str, tenant: str
) -> None:
    from jobwarden.models.persistence import schedule_store
    from jobwarden.models.schedules.slots import parse_spec
    from jobwarden.tasks.schedules import tick_once

    failed = insert_operation(database_url, tenant, S.failed)
    derived = decide_escalation(str(failed), "resubmit", "alice", "provider fixed")
    assert derived.resubmitted_as is not None
    planted = insert_operation(
        database_url, tenant, S.failed, idempotency_key=f"resubmit:{failed}x"
    )
    slot = datetime(2026, 1, 1, tzinfo=UTC)
    squatter = insert_operation(
        database_url,
        tenant,
        S.observing,
        idempotency_key=f"schedule:nightly:{slot:%Y-%m-%dT%H:%M:%SZ}",
    )
    rt = current()
    spec = parse_spec(
        tenant,
        "hourly",
        {"interval_seconds": 3600, "provider": "sandbox", "command": {"polls_to_finish": 1}},
        key_limit=255,
    )
    with transaction(database_url) as session:
        schedule_store.declare(session, spec, source="api", actor="ana", now=slot)
    tick_once(rt, clock=lambda: slot + timedelta(seconds=1))

    done = _cli("keys", "check", "--tenant", tenant, "--json")
    assert done.returncode == 1, done.stderr
    found = {f["operation_id"]: f for f in json.loads(done.stdout)}
    assert set(found) == {str(planted), str(squatter)}
    assert found[str(planted)]["reason"] == ("no resubmission links it to an operation it replaces")
    assert found[str(squatter)]["reason"] == "no schedule slot names it"
    plain = _cli("keys", "check", "--tenant", tenant)
    assert plain.returncode == 1
    assert plain.stdout.splitlines()[-1] == (
        "4 keys in reserved namespaces, 2 not derived by jobwarden"
    )
    assert uuid.UUID(derived.resubmitted_as) not in {uuid.UUID(k) for k in found}


def test_a_schedule_slot_never_adopts_an_operation_planted_under_its_key(
    database_url: str, tenant: str
) -> None:
    from jobwarden.models.persistence import schedule_store
    from jobwarden.models.schedules.slots import parse_spec
    from jobwarden.tasks.schedules import tick_once

    slot = datetime(2026, 1, 1, tzinfo=UTC)
    # Planted before intake refused reserved keys: the next slot's key, another command.
    planted = insert_operation(
        database_url,
        tenant,
        S.create_pending,
        idempotency_key="schedule:hourly:2026-01-01T00:00:00Z",
        command={"polls_to_finish": 1, "to": "mallory"},
    )
    spec = parse_spec(
        tenant,
        "hourly",
        {"interval_seconds": 3600, "provider": "sandbox", "command": {"polls_to_finish": 1}},
        key_limit=255,
    )
    with transaction(database_url) as session:
        schedule_store.declare(session, spec, source="api", actor="ana", now=slot)
    tick_once(current(), clock=lambda: slot + timedelta(seconds=1))
    with transaction(database_url) as session:
        row = schedule_store.find(session, tenant, "hourly")
        assert row is not None
        (decided,) = schedule_store.slots_of(session, row.schedule_id)
    assert (decided.state, decided.operation_id) == ("refused", None)
    assert decided.reason == (
        f"idempotency key schedule:hourly:2026-01-01T00:00:00Z is held by operation {planted}, "
        "which this schedule did not submit: refusing to adopt it (see `jobwarden keys check`)"
    )
