"""The breaker door (issue 39): show, hold and close a provider's breaker through Python,
HTTP and the CLI, held to the promises that apply to a decision over every tenant's
operations — no tenant's token holds or closes it (the operate scope does), the author is
the authenticated principal (break-glass recorded as such), no 500 from input."""

from __future__ import annotations

import contextlib
import uuid

import pytest

from jobwarden.models.actions import EscalationReason
from jobwarden.models.contracts.contract import Breaker
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.provider.breaker import AnswerClass, Tripped, WindowCounts
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.humans import breakers
from jobwarden.tasks.provider import breaker
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import HOOKS, Doors

OPERATING = ("read", "pause", "operate")
PAUSING = ("read", "pause")
POLICY = Breaker(window_seconds=10, minimum_count=2)
WHY = Tripped(
    reason=EscalationReason.provider_failure,
    kind=AnswerClass.server_error,
    observed=1.0,
    threshold=0.5,
)


def _opened(d: Doors) -> uuid.UUID:
    """An open breaker at HOOKS holding one running operation; its incident id."""
    insert_operation(d.url, tenant_name(), S.observing, provider=HOOKS, next_poll_at=None)
    counts = WindowCounts(answers=2, server_error=2)
    found = breaker.open_breaker(d.rt, HOOKS, POLICY, WHY, counts)
    assert found is not None
    return found.incident_id


def _closed(d: Doors) -> None:
    with contextlib.suppress(RefusedInputError):  # already closed by the cell
        breakers.close(HOOKS, "matrix", runtime=d.rt)


def tenant(d: Doors) -> None:
    _opened(d)
    try:
        mine = tenant_name()
        with d.http(d.token(mine, "mallory", PAUSING)) as client:
            # Every tenant's token reads the state (its operations are among those held) ...
            shown = client.get(f"/v1/providers/{HOOKS}/breaker")
            assert shown.status_code == 200 and shown.json()["state"] == "open", shown.text
            # ... but one tenant never holds or closes what holds every tenant's work.
            for action in ("hold", "close"):
                refused = client.post(f"/v1/providers/{HOOKS}/breaker/{action}", json={})
                assert refused.status_code == 403, refused.text
        cli = d.cli(
            "breaker", "close", HOOKS, env={"JOBWARDEN_TOKEN": d.token(mine, "mallory", PAUSING)}
        )
        assert cli.returncode != 0, cli.stdout
        assert breakers.show(HOOKS, runtime=d.rt).state == "open"
    finally:
        _closed(d)


def identity(d: Doors) -> None:
    _opened(d)
    try:
        mine = tenant_name()
        with d.http(d.token(mine, "bob", OPERATING)) as client:
            typed = client.post(f"/v1/providers/{HOOKS}/breaker/close", json={"closed_by": "x"})
            assert typed.status_code == 422, typed.text  # no field names who closes
            held = client.post(f"/v1/providers/{HOOKS}/breaker/hold", json={})
        assert held.status_code == 200, held.text
        assert held.json()["incident"]["held_by"] == "token:bob"
        # A name spelt as a principal is text, not a credential.
        with pytest.raises(RefusedInputError, match="closed_by"):
            breakers.close(HOOKS, "token:carol", runtime=d.rt)
        done = d.cli(
            "breaker", "close", HOOKS, env={"JOBWARDEN_TOKEN": d.token(mine, "carol", OPERATING)}
        )
        assert done.returncode == 0, done.stderr
        view = breakers.show(HOOKS, runtime=d.rt)
        assert view.state == "closed" and view.incident is not None
        assert view.incident.closed_by == "token:carol"
        # Break-glass, recorded as such.
        _opened(d)
        glass = d.cli("breaker", "close", HOOKS, "--break-glass", "pager")
        assert glass.returncode == 0, glass.stderr
        closer = breakers.show(HOOKS, runtime=d.rt).incident
        assert closer is not None and (closer.closed_by or "").startswith("break-glass:")
    finally:
        _closed(d)


def hostile(d: Doors) -> None:
    mine = tenant_name()
    with d.http(d.token(mine, "eve", OPERATING)) as client:
        for method, path, body in (
            ("GET", f"/v1/providers/{'x' * 300}/breaker", None),
            ("GET", "/v1/providers/nope/breaker", None),
            ("POST", f"/v1/providers/{HOOKS}/breaker/close", {"note": "\u0000"}),
            ("POST", f"/v1/providers/{HOOKS}/breaker/close", {"note": ["list"]}),
            ("POST", f"/v1/providers/{HOOKS}/breaker/close", {}),  # not open: 409
            ("POST", f"/v1/providers/{HOOKS}/breaker/hold", {}),
        ):
            answer = client.request(method, path, json=body)
            assert 400 <= answer.status_code < 500, (path, answer.text)
            assert "Traceback" not in answer.text
    for args in (
        ("breaker", "show", "nope"),
        ("breaker", "close", HOOKS, "--break-glass", "x"),
        ("breaker", "hold", "nope", "--break-glass", "x"),
    ):
        done = d.cli(*args)
        assert done.returncode != 0 and "Traceback" not in done.stderr, (args, done.stderr)
