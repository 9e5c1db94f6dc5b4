"""No 500 from input (issue 33, findings 5 and 6): hostile bytes, NUL, lone surrogates and
numbers past every bound through each door are a refusal naming the field, never a crash,
a traceback or an ``api_unexpected_error`` line in the log.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from jobwarden.models.errors import RefusedInputError
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.intake import submit_from_message, submit_operation
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import (
    COMMAND,
    HOOKS,
    SECRETS,
    Doors,
    as_message,
    csrf,
    tool_error,
    watching_logs,
)
from tests.integration.matrix.webhook_bodies import signed

# (field, hostile value): what the Python and Celery doors take as keywords.
FIELDS: list[tuple[str, Any]] = [
    ("command", {"\udcff": 1}),  # a lone surrogate in a key: text Postgres cannot store
    ("command", {"a": "x\x00y"}),
    ("idempotency_key", "k\x00ey"),
    ("tenant", "t\udcffx"),
    ("max_status_requests", 2**70),
    ("result_deadline_seconds", 1e308),
    ("cancel_deadline_seconds", float("nan")),
    ("priority", 11),
    ("priority", 2**70),
    ("priority", "high"),
]


def _submission(tenant: str, field: str, value: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "tenant": tenant,
        "provider": "sandbox",
        "idempotency_key": f"k-{secrets.token_hex(4)}",
        "command": COMMAND,
        "requested_by": "svc",
    }
    return {**fields, field: value}


def python(d: Doors) -> None:
    tenant = tenant_name()
    for field, value in FIELDS:
        with pytest.raises(RefusedInputError) as refused:
            submit_operation(**_submission(tenant, field, value), runtime=d.rt)
        assert field in str(refused.value), (field, str(refused.value))


def celery(d: Doors) -> None:
    tenant = tenant_name()
    for field, value in FIELDS:
        answer = submit_from_message(as_message(_submission(tenant, field, value)))
        assert answer["outcome"] == "invalid" and field in answer["error"], (field, answer)


# Raw bodies of POST /v1/operations: (body, what the refusal must name).
HTTP_BODIES: list[tuple[bytes, str]] = [
    (b'{"provider": "sandbox", "command": {"\\udcff": 1}}', "command"),
    (b'{"provider": "sandbox", "command": {"a": "\\u0000"}}', "command"),
    (b'{"provider": "sand\xffbox", "command": {}}', ""),  # not UTF-8
    (b'{"provider": "sandbox", "command": {}, "bounds": {"max_status_requests": 1e999}}', ""),
    (
        b'{"provider": "sandbox", "command": {}, "bounds": {"max_status_requests": '
        + str(2**70).encode()
        + b"}}",
        "max_status_requests",
    ),
    (b'{"provider": "sandbox", "command": ' + b"[" * 5000 + b"]" * 5000 + b"}", ""),
    (b'{"provider": "sandbox", "command": {}, "priority": 11}', "priority"),
    (
        b'{"provider": "sandbox", "command": {}, "priority": ' + str(2**70).encode() + b"}",
        "priority",
    ),
    (b'{"provider": "sandbox", "command": {}, "priority": "high"}', "priority"),
]


def http(d: Doors) -> None:
    secret = d.token(tenant_name(), "svc")
    with watching_logs() as logs, d.http(secret) as client:
        for body, field in HTTP_BODIES:
            answer = client.post(
                "/v1/operations",
                content=body,
                headers={
                    "Idempotency-Key": secrets.token_hex(4),
                    "Content-Type": "application/json",
                },
            )
            assert 400 <= answer.status_code < 500, (body[:80], answer.text)
            assert field in answer.text, (body[:80], answer.text)
    assert logs.errors() == []


def _nested(depth: int) -> list[Any]:
    deep: list[Any] = []
    for _ in range(depth):
        deep = [deep]
    return deep


def mcp(d: Doors) -> None:
    tenant = tenant_name()
    start = {"operation_key": "k", "provider": "sandbox", "command": COMMAND}
    hostile: list[tuple[dict[str, Any], str]] = [
        ({**start, "command": {"a\x00b": 1}}, "command"),
        ({**start, "operation_key": "k\x00"}, "operation_key"),
        ({**start, "bounds": {"max_status_requests": 2**70}}, "max_status_requests"),
        ({**start, "bounds": {"result_deadline_seconds": 1e308}}, "result_deadline_seconds"),
        ({**start, "business_deadline": "9999-12-31T23:59:59-14:00"}, "business_deadline"),
        ({**start, "command": {"deep": _nested(100)}}, "command"),
        ({**start, "priority": 11}, "priority"),
        ({**start, "priority": 2**70}, "priority"),
    ]
    with watching_logs() as logs:
        answers = d.mcp(d.token(tenant, "agent"), *[("start_operation", a) for a, _ in hostile])
    for answer, (_, field) in zip(answers, hostile, strict=True):
        assert field in tool_error(answer), field
    assert logs.errors() == []
    # Refused, so nothing was recorded but the refusals themselves.
    assert all(e.outcome == "invalid" for e in d.intake_of_tenant(tenant))


def cli(d: Doors) -> None:
    tenant = tenant_name()
    cases = [
        (['{"\\udcff": 1}'], "command"),
        (['{"kind": "export"}', "--max-status-requests", str(2**70)], "max_status_requests"),
        (['{"kind": "export"}', "--result-deadline-seconds", "1e308"], "result_deadline"),
        (["[" * 5000 + "]" * 5000], "command"),
        (['{"kind": "export"}', "--priority", "11"], "priority"),
        (['{"kind": "export"}', "--priority", "high"], "priority"),
    ]
    for args, field in cases:
        key = f"k-{secrets.token_hex(4)}"
        done = d.cli("submit", "sandbox", *args, "--key", key, "--tenant", tenant)
        assert done.returncode == 2, (args[0][:40], done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and field in done.stderr, done.stderr


def console(d: Doors) -> None:
    tenant = tenant_name()
    op = insert_operation(d.url, tenant, S.awaiting_approval)
    page = f"/console/operations/{op}"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    with watching_logs() as logs:
        with d.http() as stranger:
            stranger.get("/console/login")
            for body in (b"csrf=%C3%A9&token=x", b"csrf=\xff\xfe&token=x", b"csrf=a%00b&token=x"):
                answer = stranger.post("/console/login", content=body, headers=form)
                assert 400 <= answer.status_code < 500, (body, answer.text)
        with d.console(d.token(tenant, "bob")) as client:
            token = csrf(client.get(page).text)
            for fingerprint in ("a%00b", "%C3%A9" * 40, "%ED%B3%BF"):
                body = f"csrf={token}&fingerprint={fingerprint}".encode()
                answer = client.post(f"{page}/approvals", content=body, headers=form)
                assert 400 <= answer.status_code < 500, (fingerprint, answer.text)
    assert logs.errors() == []
    assert d.load(op).state is S.awaiting_approval


SCHEDULES: list[tuple[dict[str, Any], str]] = [
    ({"interval_seconds": 10**15}, "interval_seconds"),
    ({"interval_seconds": 2**31}, "interval_seconds"),
    ({"interval_seconds": 60, "jitter_seconds": 2**31}, "jitter_seconds"),
    ({"interval_seconds": 60, "catchup_window_seconds": 2**63}, "catchup_window_seconds"),
    ({"interval_seconds": 60, "start": "0001-01-01T00:00:00+14:00"}, "start"),
    ({"interval_seconds": 60, "end": "9999-12-31T23:59:59-14:00"}, "end"),
    ({"interval_seconds": 60, "priority": 11}, "priority"),
    ({"interval_seconds": 60, "priority": "high"}, "priority"),
]


def schedules(d: Doors) -> None:
    base = {"provider": "sandbox", "command": {"at": "{slot}"}}
    with watching_logs() as logs, d.http(d.token(tenant_name(), "alice")) as client:
        for table, field in SCHEDULES:
            name = f"s-{secrets.token_hex(3)}"
            answer = client.put(f"/v1/schedules/{name}", json={**base, **table})
            assert answer.status_code == 422, (table, answer.text)
            assert field in answer.text, (table, answer.text)
    assert logs.errors() == []
    # The same bounds in a schedule file: one line naming the field, never a traceback.
    folder = d.providers.parent / f"hostile-schedules-{secrets.token_hex(3)}"
    folder.mkdir()
    Path(folder / "acme.toml").write_text(
        'tenant = "acme"\n\n[schedules.big]\ninterval_seconds = 2147483648\n'
        'provider = "sandbox"\ncommand = { at = "{slot}" }\n'
    )
    (folder / "a-directory.toml").mkdir()
    checked = d.cli("schedules", "check", "--dir", str(folder))
    assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr
    assert "interval_seconds" in checked.stderr


def resubmit(d: Doors) -> None:
    tenant = tenant_name()
    old = insert_operation(d.url, tenant, S.failed)
    notes = [
        b'{"option": "resubmit", "note": "why\\u0000"}',
        b'{"option": "resubmit", "note": "\\udcff"}',
        b'{"option": "resubmit", "note": "' + b"x" * 100_000 + b'"}',
        b'{"option": "resubmit", "note": "\xff"}',
    ]
    with watching_logs() as logs, d.http(d.token(tenant, "oncall")) as client:
        for body in notes:
            answer = client.post(
                f"/v1/operations/{old}/decisions",
                content=body,
                headers={"Content-Type": "application/json"},
            )
            assert 400 <= answer.status_code < 500, (body[:60], answer.text)
            assert "note" in answer.text or answer.status_code == 400, answer.text
    assert logs.errors() == []
    assert d.load(old).resubmitted_as is None


def webhooks(d: Doors) -> None:
    secret = SECRETS[HOOKS]
    bodies = [
        b"\xff\xfe\x00",
        b'{"id": "\\udcff", "job": {"id": "\\u0000"}, "status": "succeeded"}',
        b'{"id": "evt", "job": {"id": 1e999999}}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"id": "' + b"e" * 10_000 + b'", "job": {"id": "j"}}',
    ]
    with watching_logs() as logs, d.http() as client:
        for body in bodies:
            answer = client.post(
                f"/v1/webhooks/{HOOKS}", content=body, headers=signed(secret, body)
            )
            assert answer.status_code < 500, (body[:40], answer.text)
            if answer.status_code >= 400:
                assert answer.headers["content-type"].startswith("application/problem+json")
    assert logs.errors() == []
