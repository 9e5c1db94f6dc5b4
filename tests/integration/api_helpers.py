"""Helpers for the query and action route tests: tokens, operations in a chosen state.

Operations are written as intake writes them (tests/integration/factories.py: one intent
event, a verified chain) so a test can start from any state — escalated, awaiting
approval — without a worker.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from jobwarden.api.auth import new_token, secret_hash
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import api_store, store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from tests.integration.factories import insert_in

NOW = datetime.now(UTC).replace(microsecond=0)


def tenant_name() -> str:
    """A tenant of the test's own: rows of other tests never show in its lists."""
    return f"tenant-{secrets.token_hex(4)}"


def make_token(
    url: str,
    tenant: str,
    name: str,
    scopes: Sequence[str],
    *,
    allow_self_approval: bool | None = None,
) -> dict[str, str]:
    """Authorization headers for a new token of ``tenant``."""
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
        if allow_self_approval is not None:
            api_store.set_self_approval(session, tenant, allow=allow_self_approval, now=NOW)
    return {"Authorization": f"Bearer {token}"}


def insert_operation(
    url: str,
    tenant: str,
    state: S = S.observing,
    *,
    created_at: datetime | None = None,
    **overrides: Any,
) -> uuid.UUID:
    """An operation of ``tenant`` in ``state``, written as intake writes one (factories)."""
    at = created_at or NOW
    op_id = overrides.pop("operation_id", None) or uuid.uuid4()
    values: dict[str, Any] = dict(
        operation_id=op_id,
        create_deadline=at + timedelta(minutes=5),
        result_deadline=NOW + timedelta(hours=1),
        max_status_requests=10,
        max_transport_failures=3,
        next_poll_at=None,
        dispatched_at=None,
        create_attempts=0 if state is S.awaiting_approval else 1,
    )
    if state not in (S.awaiting_approval, S.create_pending):
        values |= {"remote_job_id": f"job_{op_id.hex[:12]}", "status_url": "/v1/jobs/x"}
    values.update(overrides)
    return insert_in(url, state, at=at, tenant=tenant, **values).operation_id


def load(url: str, op_id: uuid.UUID) -> Operation:
    with transaction(url) as session:
        row = store.load(session, op_id)
    assert row is not None
    return row


def pages(client: httpx.Client, path: str, headers: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    """Every page of a list, following links.next."""
    link: str | None = path
    while link is not None:
        answer = client.get(link, headers=headers)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        yield body
        link = body["links"]["next"]
