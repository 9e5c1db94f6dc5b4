"""The MCP door's pause tools (issue 39): an agent reads the pauses holding its tenant's
operations; it pauses or resumes only with the pause scope, as its token's principal,
and only its own tenant's."""

from __future__ import annotations

from typing import Any

import anyio

from jobwarden.models.history.chain import EventKind
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from tests.integration.api_helpers import insert_operation, load, tenant_name
from tests.integration.test_mcp_door import _answer, _error, _in_process, _token


def _call(url: str, token: str, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    async def run() -> list[Any]:
        async with _in_process(url, token) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(run)


def test_an_agent_reads_pauses_and_pauses_only_with_the_pause_scope(database_url: str) -> None:
    tenant, other = tenant_name(), tenant_name()
    op = insert_operation(database_url, tenant, S.observing, next_poll_at=None)
    reader = _token(database_url, tenant, ("read",), name="reader")
    (refused,) = _call(
        database_url, reader, ("pause_operation", {"operation_id": str(op), "reason": "r"})
    )
    assert "insufficient_scope" in _error(refused)
    assert load(database_url, op).hold is None

    agent = _token(database_url, tenant, ("read", "pause"), name="agent")
    stranger = _token(database_url, other, ("read", "pause"), name="mallory")
    (foreign,) = _call(
        database_url, stranger, ("pause_operation", {"operation_id": str(op), "reason": "r"})
    )
    assert "not_found" in _error(foreign)
    paused, listed = _call(
        database_url,
        agent,
        ("pause_operation", {"operation_id": str(op), "reason": "the agent saw damage"}),
        ("list_pauses", {}),
    )
    pause = _answer(paused)
    assert pause["paused_by"] == "token:agent" and pause["parked"] == 1
    assert [p["pause_id"] for p in _answer(listed)["pauses"] if p["operation_id"] == str(op)] == [
        pause["pause_id"]
    ]
    with transaction(database_url) as session:
        (event,) = [
            e.draft for e in store.events_for(session, op) if e.draft.kind is EventKind.paused
        ]
    assert event.actor == "human:token:agent"
    (not_theirs,) = _call(database_url, stranger, ("resume_pause", {"pause_id": pause["pause_id"]}))
    assert "not_found" in _error(not_theirs)
    (bad,) = _call(database_url, agent, ("resume_pause", {"pause_id": "not-a-uuid"}))
    assert "not_found" in _error(bad)
    (resumed,) = _call(database_url, agent, ("resume_pause", {"pause_id": pause["pause_id"]}))
    assert _answer(resumed)["woken"] == 1
    assert load(database_url, op).hold is None


def test_an_agent_reads_a_breaker_and_holds_or_closes_it_only_as_an_operator(
    database_url: str,
) -> None:
    from jobwarden.models.actions import EscalationReason
    from jobwarden.models.contracts.contract import Breaker
    from jobwarden.models.provider.breaker import AnswerClass, Tripped, WindowCounts
    from jobwarden.tasks.humans import breakers
    from jobwarden.tasks.provider import breaker
    from jobwarden.tasks.runtime import current

    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.observing, next_poll_at=None)
    why = Tripped(
        reason=EscalationReason.provider_failure,
        kind=AnswerClass.transport,
        observed=1.0,
        threshold=0.5,
    )
    opened = breaker.open_breaker(
        current(), "sandbox", Breaker(), why, WindowCounts(answers=9, transport=9)
    )
    assert opened is not None
    try:
        breakers.park_all(current(), "sandbox")
        agent = _token(database_url, tenant, ("read", "pause"), name="agent")
        shown, refused = _call(
            database_url,
            agent,
            ("show_breaker", {"provider": "sandbox"}),
            ("close_breaker", {"provider": "sandbox"}),
        )
        assert _answer(shown)["state"] == "open"
        assert _answer(shown)["incident"]["evidence"]["counts"]["transport"] == 9
        assert "insufficient_scope" in _error(refused)
        operator = _token(database_url, tenant, ("read", "pause", "operate"), name="ops")
        held, closed = _call(
            database_url,
            operator,
            ("hold_breaker", {"provider": "sandbox"}),
            ("close_breaker", {"provider": "sandbox", "note": "fixed"}),
        )
        assert _answer(held)["incident"]["held_by"] == "token:ops"
        assert _answer(closed)["state"] == "closed"
        assert _answer(closed)["incident"]["closed_by"] == "token:ops"
        assert load(database_url, op).held_by is None
    finally:
        if breakers.show("sandbox").state != "closed":
            breakers.close("sandbox", "cleanup")
