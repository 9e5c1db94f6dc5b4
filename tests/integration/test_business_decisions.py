"""The two business decisions only a person takes (issue 20, item 3), through every door
against the real database and Redis: ``resubmit`` (a new operation, a new token, linked
both ways, never a re-send under the old token) and ``accept_result`` (a result that
failed validation, accepted as it is, in ``result_accepted``, never ``succeeded``).

Over HTTP a refusal is an RFC 9457 problem: an option not offered is a 422 naming the
offered ones, a business decision without a reason a 422 naming ``note``.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobwarden.api.auth import create_token
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.intake.resubmission import resubmission
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import ResultRow
from jobwarden.models.states import OperationState as S
from tests.api_server import serving
from tests.integration.api_helpers import NOW, insert_operation, load, make_token, tenant_name
from tests.integration.test_cli import _cli

ALL = ["read", "cancel", "approve", "decide"]
TYPE = "tag:jobwarden.dev,2026:problem/"
REPO = Path(__file__).resolve().parents[2]
KEPT = b'{"items": [1], "failed_items": [2, 3, 4], "record_count": 4}'
KEPT_SHA = hashlib.sha256(KEPT).hexdigest()


@pytest.fixture(scope="module")
def client(database_url: str) -> Iterator[httpx.Client]:
    from jobwarden.console.app import create_app

    with serving(create_app()) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


def _events(database_url: str, op: uuid.UUID) -> list[Any]:
    with transaction(database_url) as session:
        return [e.draft for e in store.events_for(session, op)]


def _failed_validation(database_url: str, tenant: str, *, kept: bool = True) -> uuid.UUID:
    """An operation whose result failed validation; with ``kept`` its bytes are stored and
    its rejection records them, as the collect step writes them."""
    summary = {"valid": False, "problem": "3 of 4 items failed", "sha256": KEPT_SHA}
    summary |= {"size_bytes": len(KEPT), "kept": True} if kept else {}
    op = insert_operation(database_url, tenant, S.result_validation_failed)
    with transaction(database_url) as session:
        row = store.load(session, op)
        assert row is not None
        from jobwarden.models.history.chain import EventDraft

        rejected = EventDraft(
            kind=EventKind.result_rejected,
            actor="worker",
            at=NOW,
            cause="3 of 4 items failed",
            excerpt=summary,
        )
        store.fenced_update(
            session, row, changes={"validation_summary": summary}, drafts=[rejected], now=NOW
        )
        if kept:
            session.add(
                ResultRow(
                    operation_id=op,
                    content=KEPT,
                    content_type="application/json",
                    sha256=KEPT_SHA,
                    size_bytes=len(KEPT),
                    collected_at=NOW,
                )
            )
    return op


def _decide(client: httpx.Client, op: uuid.UUID, headers: dict[str, str], **body: str) -> Any:
    return client.post(f"/v1/operations/{op}/decisions", json=body, headers=headers)


def _problem(answer: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body: dict[str, Any] = answer.json()
    assert body["type"] == TYPE + kind, body
    return body


@pytest.mark.parametrize("ended", [S.failed, S.expired, S.cancelled, S.result_unavailable])
def test_a_failed_operation_resubmitted_over_http_is_a_new_operation_linked_both_ways(
    database_url: str, client: httpx.Client, ended: S
) -> None:
    tenant = tenant_name()
    old = insert_operation(database_url, tenant, ended)
    headers = make_token(database_url, tenant, "oncall", ALL)
    shown = client.get(f"/v1/operations/{old}", headers=headers).json()
    assert [o["option"] for o in shown["escalation"]["options"]] == ["resubmit"]

    answer = _decide(client, old, headers, option="resubmit", note="the provider fixed its bug")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["state"] == ended.value  # the old one stays as it ended
    new = uuid.UUID(body["resubmitted_as"])
    assert body["resubmitted_state"] == "create_pending"

    before, after = load(database_url, old), load(database_url, new)
    # A new operation: its own id, key and token, the same command.
    assert after.provider_token != before.provider_token
    assert after.idempotency_key == f"resubmit:{old}"
    assert after.command == before.command
    assert (after.resubmit_of, before.resubmitted_as) == (old, new)
    assert after.requested_by == "token:oncall"
    # Both histories name the other.
    link = _events(database_url, old)[-1]
    assert (link.kind, link.actor, link.to_state) == (
        EventKind.resubmitted,
        "human:token:oncall",
        None,
    )
    assert link.excerpt == {
        "option": "resubmit",
        "note": "the provider fixed its bug",
        "resubmitted_as": str(new),
    }
    (intent,) = _events(database_url, new)
    assert intent.kind is EventKind.intent_recorded and intent.excerpt["resubmit_of"] == str(old)
    assert client.get(f"/v1/operations/{new}", headers=headers).json()["resubmit_of"] == str(old)
    # Resubmitted once: the option is gone, and asking again is refused, nothing new made.
    again = _decide(client, old, headers, option="resubmit", note="again")
    _problem(again, 409, "conflict")
    with transaction(database_url) as session:
        assert store.verify(session, old) == [] and store.verify(session, new) == []


def test_a_business_decision_without_a_reason_is_a_422_naming_the_note(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    old = insert_operation(database_url, tenant, S.failed)
    headers = make_token(database_url, tenant, "oncall", ALL)
    refused = _problem(
        _decide(client, old, headers, option="resubmit", note=" "), 422, "invalid_request"
    )
    assert refused["errors"][0]["path"] == "note"
    assert load(database_url, old).resubmitted_as is None


def test_resubmit_is_offered_only_after_a_known_final_failure(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    headers = make_token(database_url, tenant, "oncall", ALL)
    for state in (S.succeeded, S.abandoned, S.observing):
        op = insert_operation(database_url, tenant, state)
        _problem(_decide(client, op, headers, option="resubmit", note="why"), 409, "conflict")
    stopped = insert_operation(database_url, tenant, S.escalated, escalation_reason="unknown_state")
    refused = _problem(
        _decide(client, stopped, headers, option="resubmit", note="why"), 422, "option_not_offered"
    )
    assert "resubmit" not in refused["offered"]
    timed_out = insert_operation(
        database_url, tenant, S.result_timed_out, escalation_reason="deadline_exceeded"
    )
    offered = client.get(f"/v1/operations/{timed_out}", headers=headers).json()["escalation"]
    assert "resubmit" in [o["option"] for o in offered["options"]]


def test_a_resubmission_past_the_business_deadline_is_not_offered(database_url: str) -> None:
    from jobwarden.tasks.humans.interventions import decide_escalation, escalation_options

    op = insert_operation(database_url, tenant_name(), S.failed, business_deadline=NOW)
    assert escalation_options(str(op)) == []
    with pytest.raises(RefusedInputError, match="not offered"):
        decide_escalation(str(op), "resubmit", "alice", "try again")


def test_the_python_door_resubmits_once_even_when_asked_again_after_a_crash(
    database_url: str,
) -> None:
    from jobwarden.tasks.humans.interventions import decide_escalation
    from jobwarden.tasks.intake import submit_request

    old = insert_operation(database_url, tenant_name(), S.failed)
    # A crash after the replacement was made and before the link was written: intake
    # already holds the key, so asking again links that one instead of making another.
    # As tasks/humans/interventions.py submits it: linked, and allowed its reserved key.
    made = submit_request(
        resubmission(load(database_url, old), requested_by="alice"),
        door="python",
        resubmit_of=old,
        derived_key=True,
    )
    assert made.operation_id is not None
    decided = decide_escalation(str(old), "resubmit", "alice", "provider fixed")
    assert decided.resubmitted_as == made.operation_id
    assert decided.state == "failed"
    again = decide_escalation(str(old), "resubmit", "alice", "provider fixed")
    assert again.resubmitted_as == made.operation_id
    kinds = [e.kind for e in _events(database_url, old)]
    assert kinds.count(EventKind.resubmitted) == 1


def test_a_resubmission_of_an_approval_contract_waits_for_its_own_approval(
    database_url: str,
) -> None:
    from jobwarden.tasks.humans.interventions import decide_escalation

    old = insert_operation(database_url, tenant_name(), S.failed, provider="openai_batch")
    decided = decide_escalation(str(old), "resubmit", "alice", "input file replaced")
    assert decided.resubmitted_state == "awaiting_approval"
    new = load(database_url, uuid.UUID(str(decided.resubmitted_as)))
    # Its own approval, by someone else than the person who resubmitted it.
    assert (new.state, new.authorized_by, new.requested_by) == (S.awaiting_approval, None, "alice")


def test_a_kept_result_that_failed_validation_is_accepted_over_http_and_never_reads_as_success(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = _failed_validation(database_url, tenant)
    headers = make_token(database_url, tenant, "analyst", ALL)
    options = client.get(f"/v1/operations/{op}", headers=headers).json()["escalation"]["options"]
    assert [o["option"] for o in options] == ["accept_result", "resubmit"]
    assert KEPT_SHA[:12] in options[0]["label"]

    answer = _decide(
        client, op, headers, option="accept_result", note="3 failed rows are known test rows"
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "result_accepted"
    row = load(database_url, op)
    assert row.state is S.result_accepted
    assert row.validation_summary is not None and row.validation_summary["valid"] is False
    accepted = _events(database_url, op)[-1]
    assert (accepted.kind, accepted.actor, accepted.from_state, accepted.to_state) == (
        EventKind.result_accepted,
        "human:token:analyst",
        "result_validation_failed",
        "result_accepted",
    )
    assert accepted.excerpt == {
        "option": "accept_result",
        "note": "3 failed rows are known test rows",
        "sha256": KEPT_SHA,
        "size_bytes": len(KEPT),
        "validation_problem": "3 of 4 items failed",
    }
    assert all(e.to_state != "succeeded" for e in _events(database_url, op))
    with transaction(database_url) as session:
        assert store.verify(session, op) == []
    # Ended: nothing more to decide.
    _problem(_decide(client, op, headers, option="accept_result", note="again"), 409, "conflict")


def test_a_result_whose_bytes_were_not_kept_cannot_be_accepted(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = _failed_validation(database_url, tenant, kept=False)
    headers = make_token(database_url, tenant, "analyst", ALL)
    refused = _problem(
        _decide(client, op, headers, option="accept_result", note="fine"), 422, "option_not_offered"
    )
    assert refused["offered"] == ["resubmit"]
    assert load(database_url, op).state is S.result_validation_failed


def test_kept_result_bytes_replaced_after_the_rejection_fail_verify(database_url: str) -> None:
    from sqlalchemy import update

    op = _failed_validation(database_url, tenant_name())
    with transaction(database_url) as session:
        assert store.verify(session, op) == []
        altered = KEPT.replace(b"1", b"7")
        session.execute(
            update(ResultRow)
            .where(ResultRow.operation_id == op)
            .values(content=altered, sha256=hashlib.sha256(altered).hexdigest())
        )
    with transaction(database_url) as session:
        problems = [p.problem for p in store.verify(session, op)]
    assert "stored result sha256 differs from the digest this event recorded" in problems


def test_the_cli_resubmits_and_history_shows_both_links(database_url: str, tmp_path: Path) -> None:
    tenant = tenant_name()
    old = insert_operation(database_url, tenant, S.failed)
    shown = _cli("options", str(old))
    assert shown.returncode == 0, shown.stderr
    assert "resubmit" in shown.stdout
    # The CLI acts as its token's principal, read here from a file (issue 33).
    token_file = tmp_path / "carol.token"
    token_file.write_text(
        create_token(database_url, tenant=tenant, name="carol", scopes=["decide"]).token
    )
    done = _cli(
        "decide", str(old), "resubmit", "--token-file", str(token_file), "--note", "new input file"
    )
    assert done.returncode == 0, done.stderr
    new = load(database_url, old).resubmitted_as
    assert new is not None
    assert done.stdout.splitlines() == ["failed", f"resubmitted as {new} (create_pending)"]
    parent = _cli("history", str(old))
    (link,) = [line for line in parent.stdout.splitlines() if "resubmitted as" in line]
    assert link.split()[2:] == [
        "human:token:carol",
        "resubmitted",
        "as",
        f"{new}:",
        "new",
        "input",
        "file",
    ]
    child = _cli("history", str(new))
    assert f"resubmission of {old}" in child.stdout
    assert f"resubmission of  {old}" in _cli("show", str(new)).stdout
    assert f"resubmitted as   {new}" in _cli("show", str(old)).stdout


def test_the_cli_accepts_a_kept_result_and_history_says_it_was_not_validated(
    database_url: str,
) -> None:
    tenant = tenant_name()
    op = _failed_validation(database_url, tenant)
    dave = create_token(database_url, tenant=tenant, name="dave", scopes=["decide"]).token
    done = _cli(
        "decide", str(op), "accept_result", "--note", "known rows", env={"JOBWARDEN_TOKEN": dave}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "result_accepted"
    story = _cli("history", str(op)).stdout
    assert f"result accepted as it is, not validated (sha256 {KEPT_SHA}" in story


@pytest.fixture(scope="module")
def console_url(database_url: str) -> Iterator[str]:
    from jobwarden.console.app import create_app

    with serving(create_app()) as url:
        yield url


def test_the_console_resubmits_and_both_pages_link_to_each_other(
    database_url: str, console_url: str
) -> None:
    from tests.integration.test_console import _csrf, _token, login

    tenant = tenant_name()
    old = insert_operation(database_url, tenant, S.failed)
    with login(console_url, _token(database_url, tenant, "ops", ALL)) as browser:
        page = browser.get(f"/console/operations/{old}")
        assert 'data-option="resubmit"' in page.text
        blank = browser.post(
            f"/console/operations/{old}/decisions",
            data={"csrf": _csrf(page.text), "option": "resubmit", "note": " "},
        )
        assert blank.status_code == 422 and "note" in blank.text
        done = browser.post(
            f"/console/operations/{old}/decisions",
            data={"csrf": _csrf(page.text), "option": "resubmit", "note": "input fixed"},
        )
        assert done.status_code == 303, done.text
        new = load(database_url, old).resubmitted_as
        assert new is not None
        after = browser.get(done.headers["location"]).text
        assert f'id="resubmitted-as" href="/console/operations/{new}"' in after
        assert 'data-option="resubmit"' not in after  # made once
        child = browser.get(f"/console/operations/{new}").text
        assert f'id="resubmit-of" href="/console/operations/{old}"' in child
    assert _events(database_url, old)[-1].actor == "human:token:ops"


def test_the_approval_page_says_the_provider_deadlines_start_at_the_approval(
    database_url: str, console_url: str
) -> None:
    from tests.integration.test_console import _token, login

    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.awaiting_approval)
    with login(console_url, _token(database_url, tenant, "ops", ALL)) as browser:
        page = browser.get(f"/console/operations/{op}").text
    # insert_operation: a create deadline 5 min after submission, counted from approval.
    assert "<td>create</td><td>-</td><td>5 min from when it is approved</td>" in page
    assert 'data-deadline="approval window"' in page
    assert "left</td>" not in page.split('data-deadline="create"')[1].split("</tr>")[0]
