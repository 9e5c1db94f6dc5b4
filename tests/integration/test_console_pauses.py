"""The console's providers page (issue 39): each provider's state for the session's
tenant, and pause and resume buttons that post with the session's CSRF token and record
the session's principal as the author."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import httpx
import pytest

from jobwarden.models.history.chain import EventKind
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.runtime import current
from tests.api_server import serving
from tests.integration.api_helpers import insert_operation, load, make_token, tenant_name
from tests.integration.matrix.doors import csrf


@pytest.fixture(scope="module")
def base(database_url: str) -> Iterator[str]:
    from jobwarden.console.app import create_app

    with serving(create_app()) as url:
        yield url


@contextmanager
def _session(
    base: str, database_url: str, tenant: str, scopes: list[str]
) -> Iterator[httpx.Client]:
    headers = make_token(database_url, tenant, "alice", scopes)
    secret = headers["Authorization"].removeprefix("Bearer ")
    with httpx.Client(base_url=base, timeout=30) as client:
        form = client.get("/console/login")
        answer = client.post("/console/login", data={"csrf": csrf(form.text), "token": secret})
        assert answer.status_code == 303, answer.text
        yield client


def test_a_person_pauses_and_resumes_a_provider_from_the_console(
    base: str, database_url: str
) -> None:
    tenant = tenant_name()
    url = current().contract("sandbox").base_url.rstrip("/")
    op = insert_operation(
        database_url,
        tenant,
        S.observing,
        status_url=f"{url}/v1/jobs/c",
        next_poll_at=datetime.now(UTC),
    )
    with _session(base, database_url, tenant, ["read", "pause"]) as client:
        page = client.get("/console/providers")
        assert page.status_code == 200
        assert 'data-provider="sandbox"' in page.text and "running" in page.text
        forged = client.post("/console/providers/sandbox/pause", data={"reason": "x", "csrf": "no"})
        assert forged.status_code == 403 and load(database_url, op).hold is None
        token = csrf(page.text)
        done = client.post(
            "/console/providers/sandbox/pause", data={"reason": "console drill", "csrf": token}
        )
        assert done.status_code == 303, done.text
        shown = client.get("/console/providers").text
        assert "token:alice" in shown and "console drill" in shown
        held = load(database_url, op)
        assert held.hold is not None and held.held_by == held.hold.pause_id
        assert "Held by a pause" in client.get(f"/console/operations/{op}").text
        with transaction(database_url) as session:
            (event,) = [
                e.draft for e in store.events_for(session, op) if e.draft.kind is EventKind.paused
            ]
        assert event.actor == "human:token:alice"
        pause_id = held.hold.pause_id
        stranger = client.post(f"/console/pauses/{uuid.uuid4()}/resume", data={"csrf": token})
        assert stranger.status_code == 404
        resumed = client.post(f"/console/pauses/{pause_id}/resume", data={"csrf": token})
        assert resumed.status_code == 303, resumed.text
    assert load(database_url, op).hold is None and load(database_url, op).held_by is None


def test_a_session_without_the_pause_scope_sees_the_state_but_no_button(
    base: str, database_url: str
) -> None:
    with _session(base, database_url, tenant_name(), ["read"]) as client:
        page = client.get("/console/providers").text
        assert "Pause this tenant" not in page
        refused = client.post(
            "/console/providers/sandbox/pause", data={"reason": "x", "csrf": csrf(page)}
        )
        assert refused.status_code == 403


def test_an_open_breaker_shows_its_evidence_and_an_operator_closes_it(
    base: str, database_url: str
) -> None:
    from jobwarden.models.actions import EscalationReason
    from jobwarden.models.contracts.contract import Breaker
    from jobwarden.models.provider.breaker import AnswerClass, Tripped, WindowCounts
    from jobwarden.tasks.humans import breakers
    from jobwarden.tasks.provider import breaker

    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.observing, next_poll_at=None)
    why = Tripped(
        reason=EscalationReason.provider_failure,
        kind=AnswerClass.server_error,
        observed=1.0,
        threshold=0.5,
    )
    counts = WindowCounts(answers=7, server_error=7)
    incident = breaker.open_breaker(current(), "sandbox", Breaker(), why, counts)
    assert incident is not None
    try:
        breakers.park_all(current(), "sandbox")
        with _session(base, database_url, tenant, ["read", "pause"]) as client:
            page = client.get("/console/providers").text
            assert f'data-incident="{incident.incident_id}"' in page
            assert "breaker open" in page and "server_error 7" in page
            assert "Close breaker" not in page  # a tenant's session never closes it
            # The needs-a-human queue shows the incident once, naming what it holds.
            queue = client.get("/console/").text
            assert queue.count(f'data-incident="{incident.incident_id}"') == 1
            assert f"/console/operations/{op}" in queue
            refused = client.post(
                "/console/providers/sandbox/breaker/close", data={"csrf": csrf(page)}
            )
            assert refused.status_code == 403
        with _session(base, database_url, tenant, ["read", "pause", "operate"]) as client:
            page = client.get("/console/providers").text
            closed = client.post(
                "/console/providers/sandbox/breaker/close",
                data={"csrf": csrf(page), "note": "provider fixed"},
            )
            assert closed.status_code == 303, closed.text
        view = breakers.show("sandbox")
        assert view.state == "closed" and view.incident is not None
        assert view.incident.closed_by == "token:alice"
        assert load(database_url, op).held_by is None
    finally:
        if breakers.show("sandbox").state != "closed":
            breakers.close("sandbox", "cleanup")
