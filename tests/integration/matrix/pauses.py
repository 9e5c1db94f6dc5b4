"""The pause door (issue 39): pause and resume through Python, HTTP and the CLI, held to
the promises that apply to a decision — the tenant from the credential, an author that is
the authenticated principal (break-glass recorded as such), no 500 from input."""

from __future__ import annotations

import uuid

import pytest

from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.humans import pauses
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.doors import HOOKS, Doors

PAUSING = ("read", "pause")


def _running(d: Doors, tenant: str) -> uuid.UUID:
    return insert_operation(d.url, tenant, S.observing, provider=HOOKS, next_poll_at=None)


def _paused_by(d: Doors, op: uuid.UUID) -> list[str]:
    return [e.draft.actor for e in d.events(op) if e.draft.kind is EventKind.paused]


def tenant(d: Doors) -> None:
    mine, theirs = tenant_name(), tenant_name()
    op, other = _running(d, mine), _running(d, theirs)
    stranger = d.token(theirs, "mallory", PAUSING)
    with d.http(stranger) as client:
        # Another tenant's operation reads as none; a tenant's pause holds only its own.
        refused = client.post(f"/v1/operations/{op}/pause", json={"reason": "r"})
        assert refused.status_code == 404, refused.text
        share = client.post(f"/v1/providers/{HOOKS}/pause", json={"reason": "r"})
        assert share.status_code == 201, share.text
        assert share.json()["tenant"] == theirs
        everyone = client.post(
            f"/v1/providers/{HOOKS}/pause", json={"reason": "r", "all_tenants": True}
        )
        assert everyone.status_code == 403, everyone.text
    assert d.load(op).hold is None and _paused_by(d, op) == []
    assert d.load(other).hold is not None
    with d.http(d.token(mine, "alice", PAUSING)) as client:
        # Nor does another tenant resume it.
        answer = client.post(f"/v1/pauses/{share.json()['pause_id']}/resume", json={})
        assert answer.status_code == 404, answer.text
    cli = d.cli("pause", "operation", str(op), "--reason", "r", env={"JOBWARDEN_TOKEN": stranger})
    assert cli.returncode == 1 and "no operation" in cli.stderr, cli.stderr
    with pytest.raises(RefusedInputError, match="no operation"):
        pauses.pause_operation(str(op), "r", "svc", tenant=theirs, runtime=d.rt)
    pauses.resume(share.json()["pause_id"], "matrix", runtime=d.rt)


def identity(d: Doors) -> None:
    mine = tenant_name()
    op = _running(d, mine)
    with d.http(d.token(mine, "bob", PAUSING)) as client:
        typed = client.post(
            f"/v1/operations/{op}/pause", json={"reason": "r", "paused_by": "mallory"}
        )
        assert typed.status_code == 422, typed.text  # no field names who pauses
        done = client.post(f"/v1/operations/{op}/pause", json={"reason": "r"})
    assert done.status_code == 201, done.text
    assert done.json()["paused_by"] == "token:bob"
    assert _paused_by(d, op) == ["human:token:bob"]
    # A name spelt as a principal is text, not a credential.
    with pytest.raises(RefusedInputError, match="paused_by"):
        pauses.pause_provider(HOOKS, "r", "token:carol", tenant=mine, runtime=d.rt)
    # The CLI acts as its token's principal, or breaks glass, recorded as such.
    other = _running(d, mine)
    resumed = d.cli(
        "resume", done.json()["pause_id"], env={"JOBWARDEN_TOKEN": d.token(mine, "carol", PAUSING)}
    )
    assert resumed.returncode == 0, resumed.stderr
    assert pauses.find_pause(uuid.UUID(done.json()["pause_id"]), runtime=d.rt).resumed_by == (  # type: ignore[union-attr]
        "token:carol"
    )
    glass = d.cli("pause", "operation", str(other), "--reason", "r", "--break-glass", "pager")
    assert glass.returncode == 0, glass.stderr
    (event,) = [e.draft for e in d.events(other) if e.draft.kind is EventKind.paused]
    assert event.actor.startswith("human:break-glass:")
    assert (event.excerpt or {}).get("break_glass") == "pager"
    for found in pauses.pauses(provider=HOOKS, tenant=mine, runtime=d.rt):
        if found.tenant == mine:
            pauses.resume(str(found.pause_id), "matrix", runtime=d.rt)


def hostile(d: Doors) -> None:
    mine = tenant_name()
    op = _running(d, mine)
    with d.http(d.token(mine, "eve", PAUSING)) as client:
        for path, body in (
            (f"/v1/providers/{HOOKS}/pause", {"reason": "\u0000"}),
            (f"/v1/providers/{HOOKS}/pause", {"reason": ["list"]}),
            (f"/v1/providers/{'x' * 300}/pause", {"reason": "r"}),
            (f"/v1/operations/{op}/pause", {"reason": "r" * 10_000}),
            ("/v1/pauses/%00/resume", {}),
            (f"/v1/pauses/{uuid.uuid4()}/resume", {"note": {"deep": [1]}}),
        ):
            answer = client.post(path, json=body)
            assert 400 <= answer.status_code < 500, (path, answer.text)
            assert "Traceback" not in answer.text
    for args in (
        ("pause", "operation", "not-a-uuid", "--reason", "r", "--break-glass", "x"),
        ("pause", "provider", "nope", "--reason", "r", "--tenant", mine, "--break-glass", "x"),
        ("pause", "provider", HOOKS, "--reason", " ", "--tenant", mine, "--break-glass", "x"),
        ("resume", "not-a-uuid"),
        ("resume", str(uuid.uuid4())),
    ):
        done = d.cli(*args)
        assert done.returncode != 0 and "Traceback" not in done.stderr, (args, done.stderr)
    assert d.load(op).hold is None
