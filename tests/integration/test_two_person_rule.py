"""The two-person rule through every door that approves (issue 20): the Python call, HTTP
and the console, against the real database and Redis, with a contract that says
``approvals_required = 2``. Two distinct approvers, neither the submitter; the first is
recorded and the operation keeps waiting; the second moves it on naming both.

Conventions: RFC 9457 problem details for every refusal; 303 See Other after a form POST.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobwarden.config.settings import Settings
from jobwarden.demo.harness import REPO
from jobwarden.models.errors import AnotherApproverNeededError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.identity import token_author
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from jobwarden.tasks import runtime as runtime_module
from jobwarden.tasks.humans.interventions import approve
from jobwarden.tasks.runtime import Runtime, build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from tests.api_server import serving
from tests.integration.api_helpers import insert_operation, load, make_token, tenant_name
from tests.integration.test_console import _csrf, _token, login

TWO = "sandbox_two"
ALL = ["read", "cancel", "approve", "decide"]
TYPE = "tag:jobwarden.dev,2026:problem/"


@pytest.fixture(scope="module")
def providers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped sandbox, and a copy of it for payments: two approvers."""
    folder = tmp_path_factory.mktemp("two_person_providers")
    base = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    (folder / "sandbox.toml").write_text(base)
    two = base.replace('name = "sandbox"', f'name = "{TWO}"')
    (folder / f"{TWO}.toml").write_text(
        two.replace("requires_approval = false", "approvals_required = 2")
    )
    return folder


@pytest.fixture(scope="module")
def rt(providers: Path, database_url: str) -> Iterator[Runtime]:
    built = build_runtime(Settings(providers_dir=providers))
    yield built
    close_runtime(built)
    built.redis.close()
    runtime_module.reset()


@pytest.fixture(scope="module")
def base_url(providers: Path, database_url: str) -> Iterator[str]:
    from jobwarden.console.app import create_app

    with serving(create_app(Settings(providers_dir=providers))) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30) as http:
        yield http


def _waiting(database_url: str, tenant: str) -> tuple[uuid.UUID, str]:
    """An operation of the two-person contract, submitted by alice, awaiting approval."""
    op = insert_operation(
        database_url, tenant, S.awaiting_approval, provider=TWO, requested_by="alice"
    )
    return op, load(database_url, op).request_fingerprint


def _approvals(database_url: str, op: uuid.UUID) -> list[tuple[str, str, dict[str, Any]]]:
    with transaction(database_url) as session:
        events = store.events_for(session, op)
    return [
        (e.draft.kind.value, e.draft.actor, e.draft.excerpt or {})
        for e in events
        if e.draft.kind in (EventKind.approval_recorded, EventKind.approved)
    ]


def _problem(answer: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = answer.json()
    assert body["type"] == TYPE + kind, body
    return body


def test_over_http_two_other_tokens_approve_and_the_first_answer_says_one_more_is_needed(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op, fingerprint = _waiting(database_url, tenant)
    # The tenant lets a submitter approve its own operations: not under the two-person rule.
    alice = make_token(database_url, tenant, "alice", ALL, allow_self_approval=True)
    bob = make_token(database_url, tenant, "bob", ALL)
    carol = make_token(database_url, tenant, "carol", ALL)
    path = f"/v1/operations/{op}/approvals"

    refused = _problem(
        client.post(path, json={"fingerprint": fingerprint}, headers=alice),
        403,
        "self_approval_refused",
    )
    assert "another approver" in refused["detail"]
    first = client.post(
        path, json={"fingerprint": fingerprint, "valid_for_seconds": 600}, headers=bob
    )
    assert first.status_code == 200, first.text
    body = first.json()
    assert (body["state"], body["approvals_given"], body["approvals_required"]) == (
        "awaiting_approval",
        1,
        2,
    )
    assert body["detail"] == "1 of 2 approvals: token:bob; another approver must approve"
    waiting = load(database_url, op)
    assert (waiting.state, waiting.authorized_by) == (S.awaiting_approval, None)

    again = _problem(
        client.post(path, json={"fingerprint": fingerprint}, headers=bob), 409, "same_approver"
    )
    assert "token:bob already approved; another approver must approve" in again["detail"]
    assert load(database_url, op).version == waiting.version

    second = client.post(path, json={"fingerprint": fingerprint}, headers=carol)
    assert second.status_code == 200, second.text
    assert (second.json()["state"], second.json()["approvals_given"]) == ("create_pending", 2)
    assert second.json()["detail"] is None
    row = load(database_url, op)
    assert (row.state, row.authorized_by) == (S.create_pending, "token:bob, token:carol")
    (recorded, approved) = _approvals(database_url, op)
    assert recorded[:2] == ("approval_recorded", "human:token:bob")
    assert recorded[2]["fingerprint"] == fingerprint
    # Valid until the earlier of both: bob's ten minutes, not carol's hour.
    assert row.approval_expires_at is not None
    assert row.approval_expires_at.isoformat() == recorded[2]["expires_at"]
    assert approved[:2] == ("approved", "human:token:carol")
    assert approved[2]["approvers"] == ["token:bob", "token:carol"]


def test_the_python_door_refuses_the_submitter_and_the_same_approver_twice(
    database_url: str, rt: Runtime
) -> None:
    op, fingerprint = _waiting(database_url, tenant_name())
    with pytest.raises(AnotherApproverNeededError) as submitter:
        approve(str(op), fingerprint, token_author("alice"), runtime=rt)
    assert submitter.value.reason == "self_approval_refused"
    assert approve(str(op), fingerprint, token_author("bob"), runtime=rt) == "awaiting_approval"
    with pytest.raises(AnotherApproverNeededError) as twice:
        approve(str(op), fingerprint, token_author("bob"), runtime=rt)
    assert twice.value.reason == "same_approver"
    # A typed name is no principal: it never counts toward the rule (issue 33, finding 1).
    with pytest.raises(AnotherApproverNeededError) as typed:
        approve(str(op), fingerprint, "mallory", runtime=rt)
    assert typed.value.reason == "approver_not_counted"
    assert approve(str(op), fingerprint, token_author("carol"), runtime=rt) == "create_pending"
    assert load(database_url, op).authorized_by == "token:bob, token:carol"


def test_two_approvers_at_once_never_both_count_as_the_first_nor_lose_one(
    database_url: str, rt: Runtime
) -> None:
    def give(
        start: threading.Barrier, answers: dict[str, str], op: uuid.UUID, fp: str, who: str
    ) -> None:
        start.wait()
        answers[who] = approve(str(op), fp, token_author(who), runtime=rt)

    for _ in range(5):
        op, fingerprint = _waiting(database_url, tenant_name())
        start = threading.Barrier(2, timeout=15)
        answers: dict[str, str] = {}
        threads = [
            threading.Thread(target=give, args=(start, answers, op, fingerprint, who))
            for who in ("bob", "carol")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        # One was first, the other second, whichever order the lease gave them.
        assert sorted(answers.values()) == ["awaiting_approval", "create_pending"], answers
        kinds = [kind for kind, _, _ in _approvals(database_url, op)]
        assert kinds == ["approval_recorded", "approved"]
        assert load(database_url, op).state is S.create_pending


def test_an_expired_first_approval_no_longer_counts(database_url: str, rt: Runtime) -> None:
    op, fingerprint = _waiting(database_url, tenant_name())
    # Valid for a moment only: by the second approval it has expired.
    bob, carol, dave = (token_author(n) for n in ("bob", "carol", "dave"))
    assert approve(str(op), fingerprint, bob, valid_for_seconds=0.001, runtime=rt) == (
        "awaiting_approval"
    )
    assert approve(str(op), fingerprint, carol, runtime=rt) == "awaiting_approval"
    assert approve(str(op), fingerprint, dave, runtime=rt) == "create_pending"
    assert load(database_url, op).authorized_by == "token:carol, token:dave"


def test_the_console_shows_one_of_two_and_the_first_approver_sees_no_approve_button(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    op, fingerprint = _waiting(database_url, tenant)
    page_path = f"/console/operations/{op}"
    with login(base_url, _token(database_url, tenant, "alice", ALL)) as alice:
        page = alice.get(page_path).text
        assert "0 of 2 approvals" in page and 'id="approve"' not in page
    with login(base_url, _token(database_url, tenant, "bob", ALL)) as bob:
        page = bob.get(page_path).text
        assert "0 of 2 approvals: two people other than the submitter" in page
        done = bob.post(
            f"{page_path}/approvals", data={"csrf": _csrf(page), "fingerprint": fingerprint}
        )
        assert (done.status_code, done.headers["location"]) == (303, f"{page_path}?done=approved")
        page = bob.get(page_path).text
        assert "1 of 2 approvals: token:bob; another approver must approve." in page
        assert 'id="approve"' not in page and "You approved already" in page
        twice = bob.post(
            f"{page_path}/approvals", data={"csrf": _csrf(page), "fingerprint": fingerprint}
        )
        assert twice.status_code == 409 and "another approver must approve" in twice.text
    assert load(database_url, op).state is S.awaiting_approval
    with login(base_url, _token(database_url, tenant, "carol", ALL)) as carol:
        page = carol.get(page_path).text
        assert "1 of 2 approvals: token:bob" in page and 'id="approve"' in page
        done = carol.post(
            f"{page_path}/approvals", data={"csrf": _csrf(page), "fingerprint": fingerprint}
        )
        assert done.status_code == 303, done.text
    row = load(database_url, op)
    assert (row.state, row.authorized_by) == (S.create_pending, "token:bob, token:carol")
    # The second approval started the create deadline: moved by the whole wait.
    (_, (kind, actor, approved)) = _approvals(database_url, op)
    assert (kind, actor) == ("approved", "human:token:carol")
    assert row.create_deadline.isoformat() == approved["create_deadline"]
    assert row.create_deadline > row.created_at + timedelta(minutes=5)
