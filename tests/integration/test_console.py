"""The operators' console over HTTP (no browser): its session cookie, CSRF on every form,
tenant isolation, the four-eyes rule, the queue, search, bulk decisions and the live stream.

Conventions: cookie attributes per RFC 6265bis §4.1.2.5-7 (Secure, HttpOnly, SameSite);
303 See Other after every form POST (RFC 9110 §15.4.4); server-sent events in the
text/event-stream format (WHATWG HTML §9.2).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from tests.api_server import serving
from tests.integration.api_helpers import NOW, insert_operation, load, make_token, tenant_name
from tests.integration.result_helpers import operation_with_result, pattern

ALL = ["read", "cancel", "approve", "decide"]


@pytest.fixture(scope="module")
def console_app(database_url: str) -> Any:
    from jobwarden.console.app import create_app

    return create_app()


@pytest.fixture(scope="module")
def base_url(console_app: Any) -> Iterator[str]:
    with serving(console_app) as url:
        yield url


def _token(database_url: str, tenant: str, name: str, scopes: list[str], **kw: bool) -> str:
    return make_token(database_url, tenant, name, scopes, **kw)["Authorization"].split()[1]


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


@contextmanager
def login(base_url: str, token: str) -> Iterator[httpx.Client]:
    """A client holding a console session for ``token``."""
    with httpx.Client(base_url=base_url, timeout=30) as client:
        form = client.get("/console/login")
        assert form.status_code == 200
        answer = client.post("/console/login", data={"csrf": _csrf(form.text), "token": token})
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == "/console/"
        yield client


def _page_csrf(client: httpx.Client, path: str) -> str:
    answer = client.get(path)
    assert answer.status_code == 200, answer.text
    return _csrf(answer.text)


def _set_cookie(answer: httpx.Response, name: str) -> str:
    for value in answer.headers.get_list("set-cookie"):
        if value.startswith(f"{name}="):
            return value
    raise AssertionError(f"no {name} cookie in {answer.headers.get_list('set-cookie')}")


def test_the_session_cookie_is_http_only_same_site_and_secure_except_on_loopback(
    database_url: str, base_url: str
) -> None:
    token = _token(database_url, tenant_name(), "reader", ["read"])
    for host, secure in (("127.0.0.1", False), ("console.example", True)):
        with httpx.Client(base_url=base_url, headers={"Host": host}) as client:
            form = client.get("/console/login")
            answer = client.post(
                "/console/login",
                data={"csrf": _csrf(form.text), "token": token},
                # A Secure login cookie is not sent back over plain http by httpx: send it.
                headers={"Cookie": f"jw_console_login={form.cookies['jw_console_login']}"},
            )
            assert answer.status_code == 303, answer.text
            cookie = _set_cookie(answer, "jw_console").lower()
            assert "httponly" in cookie and "samesite=lax" in cookie and "path=/console" in cookie
            assert ("; secure" in cookie) is secure, (host, cookie)
            assert token.lower() not in cookie


def test_without_a_valid_session_every_page_redirects_to_the_login(
    database_url: str, base_url: str
) -> None:
    op = insert_operation(
        database_url, tenant_name(), S.escalated, escalation_reason="unknown_state"
    )
    with httpx.Client(base_url=base_url) as client:
        for path in ("/console/", f"/console/operations/{op}", "/console/search", "/console/bulk"):
            answer = client.get(path)
            assert (answer.status_code, answer.headers.get("location")) == (303, "/console/login")
        client.cookies.set("jw_console", "eyJoIjoiYSIsImMiOiJiIn0.forged.sig", path="/console")
        assert client.get("/console/").headers.get("location") == "/console/login"


def test_an_unknown_token_or_a_login_without_its_form_token_is_refused(
    database_url: str, base_url: str
) -> None:
    token = _token(database_url, tenant_name(), "reader", ["read"])
    with httpx.Client(base_url=base_url) as client:
        form = client.get("/console/login")
        wrong = client.post("/console/login", data={"csrf": _csrf(form.text), "token": "jw_nope"})
        assert wrong.status_code == 401 and "unknown or revoked" in wrong.text
        assert "jw_console=" not in " ".join(wrong.headers.get_list("set-cookie"))
    with httpx.Client(base_url=base_url) as client:
        forged = client.post("/console/login", data={"csrf": "guess", "token": token})
        assert forged.status_code == 403 and "csrf" in forged.text


def test_a_revoked_token_ends_its_console_session(database_url: str, base_url: str) -> None:
    from jobwarden.api.auth import secret_hash
    from jobwarden.models.persistence import api_store

    token = _token(database_url, tenant_name(), "reader", ["read"])
    with login(base_url, token) as client:
        assert client.get("/console/").status_code == 200
        with transaction(database_url) as session:
            record = api_store.token_by_hash(session, secret_hash(token))
            assert record is not None
            api_store.revoke_token(session, record.token_id, now=NOW)
        assert client.get("/console/").headers.get("location") == "/console/login"


def test_a_decision_without_the_session_csrf_token_is_refused_and_changes_nothing(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(
        database_url, tenant, S.escalated, escalation_reason="request_budget_exhausted"
    )
    before = load(database_url, op)
    with login(base_url, _token(database_url, tenant, "ops", ALL)) as client:
        for csrf in ("", "not-the-token"):
            answer = client.post(
                f"/console/operations/{op}/decisions",
                data={"csrf": csrf, "option": "extend", "note": "more time"},
            )
            assert answer.status_code == 403 and "csrf" in answer.text
    after = load(database_url, op)
    assert (after.version, after.state) == (before.version, before.state)


def test_an_operator_extends_an_escalation_with_a_reason_recorded_as_theirs(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(
        database_url,
        tenant,
        S.escalated,
        escalation_reason="request_budget_exhausted",
        status_requests_used=10,
    )
    with login(base_url, _token(database_url, tenant, "alice", ALL)) as client:
        page = client.get(f"/console/operations/{op}")
        assert "extend once: +15 min, +4 checks" in page.text and "chain verified" in page.text
        csrf = _csrf(page.text)
        blank = client.post(
            f"/console/operations/{op}/decisions",
            data={"csrf": csrf, "option": "extend", "note": "  "},
        )
        assert blank.status_code == 422 and "note" in blank.text
        done = client.post(
            f"/console/operations/{op}/decisions",
            data={"csrf": csrf, "option": "extend", "note": "provider is slow today"},
        )
        assert (done.status_code, done.headers["location"]) == (
            303,
            f"/console/operations/{op}?done=extend",
        )
        shown = client.get(done.headers["location"]).text
        assert "10 of 14" in shown and "observing" in shown
    row = load(database_url, op)
    assert (row.state, row.max_status_requests, row.status_requests_used) == (S.observing, 14, 10)
    with transaction(database_url) as session:
        last = store.events_for(session, op)[-1].draft
    assert (last.actor, last.cause) == ("human:token:alice", "extend")
    assert last.excerpt is not None and last.excerpt["note"] == "provider is slow today"


def test_another_tenants_operation_is_not_found_on_its_page_and_its_forms(
    database_url: str, base_url: str
) -> None:
    op = insert_operation(
        database_url, tenant_name(), S.escalated, escalation_reason="unknown_state"
    )
    before = load(database_url, op)
    with login(base_url, _token(database_url, tenant_name(), "mallory", ALL)) as client:
        assert client.get(f"/console/operations/{op}").status_code == 404
        assert client.get(f"/console/operations/{op}/stream").status_code == 404
        csrf = _page_csrf(client, "/console/")
        answer = client.post(
            f"/console/operations/{op}/decisions",
            data={"csrf": csrf, "option": "abandon", "note": "mine now"},
        )
        assert answer.status_code == 404
    assert load(database_url, op).version == before.version


def test_the_submitter_cannot_approve_its_own_operation_and_another_approver_can(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.awaiting_approval, requested_by="token:bob")
    fingerprint = load(database_url, op).request_fingerprint
    with login(base_url, _token(database_url, tenant, "bob", ALL)) as client:
        page = client.get(f"/console/operations/{op}")
        assert "another approver must approve it" in page.text and 'id="approve"' not in page.text
        answer = client.post(
            f"/console/operations/{op}/approvals",
            data={"csrf": _csrf(page.text), "fingerprint": fingerprint},
        )
        assert answer.status_code == 403
    assert load(database_url, op).state is S.awaiting_approval
    with login(base_url, _token(database_url, tenant, "carol", ALL)) as client:
        page = client.get(f"/console/operations/{op}")
        assert fingerprint in page.text and "valid until" in page.text
        assert "approval window" in page.text and "left)" in page.text
        wrong = client.post(
            f"/console/operations/{op}/approvals",
            data={"csrf": _csrf(page.text), "fingerprint": "0" * 64},
        )
        assert wrong.status_code == 409 and "fingerprint" in wrong.text
        answer = client.post(
            f"/console/operations/{op}/approvals",
            data={"csrf": _csrf(page.text), "fingerprint": fingerprint},
        )
        assert answer.status_code == 303, answer.text
    row = load(database_url, op)
    assert (row.state, row.authorized_by) == (S.create_pending, "token:carol")


def test_the_queue_groups_what_needs_a_human_by_reason_with_counts_oldest_first(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    old = NOW - timedelta(hours=2)
    first = insert_operation(
        database_url,
        tenant,
        S.escalated,
        escalation_reason="provider_failure",
        escalation_detail="transport budget spent",
        updated_at=old,
    )
    second = insert_operation(
        database_url, tenant, S.escalated, escalation_reason="provider_failure"
    )
    waiting = insert_operation(database_url, tenant, S.awaiting_approval)
    insert_operation(database_url, tenant, S.observing)
    with login(base_url, _token(database_url, tenant, "ops", ["read"])) as client:
        html = client.get("/console/").text
    assert '<span class="count" id="total">3</span>' in html
    failure = html.index('data-reason="provider_failure"')
    assert html.index('data-reason="awaiting_approval"') > failure
    assert html.index(str(first)) < html.index(str(second))
    assert "escalated provider_failure: transport budget spent" in html
    assert str(waiting) in html


def test_search_finds_by_remote_job_id_and_key_and_pages_newest_first_by_keyset(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    ops = [
        insert_operation(database_url, tenant, created_at=NOW + timedelta(seconds=i))
        for i in range(53)
    ]
    target = load(database_url, ops[7])
    with login(base_url, _token(database_url, tenant, "ops", ["read"])) as client:
        found = client.get("/console/search", params={"remote_job_id": target.remote_job_id})
        assert found.text.count("<tr data-operation=") == 1 and str(ops[7]) in found.text
        keyed = client.get("/console/search", params={"idempotency_key": target.idempotency_key})
        assert keyed.text.count("<tr data-operation=") == 1
        first = client.get("/console/search", params={"state": "observing"})
        assert first.text.count("<tr data-operation=") == 50
        link = re.search(r'href="([^"]+)" rel="next"', first.text)
        assert link is not None
        # Newest first: the first page starts with the last one created, the second
        # ends with the first one.
        assert first.text.index(str(ops[-1])) < first.text.index(str(ops[-2]))
        assert str(ops[0]) not in first.text
        second = client.get(link.group(1).replace("&amp;", "&"))
        assert second.text.count("<tr data-operation=") == 3
        assert second.text.index(str(ops[2])) < second.text.index(str(ops[0]))
        bad = client.get("/console/search", params={"state": "sleeping"})
        assert bad.status_code == 422 and "state" in bad.text
        forged = client.get("/console/search", params={"cursor": "bm90LWEtY3Vyc29y"})
        assert forged.status_code == 422 and "cursor" in forged.text
        assert forged.headers["content-type"].startswith("text/html")


def test_a_bulk_resume_shows_its_dry_run_count_then_decides_each_operation_alone(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    outage = [
        insert_operation(
            database_url,
            tenant,
            S.escalated,
            provider="sandbox",
            escalation_reason="provider_failure",
        )
        for _ in range(3)
    ]
    other = insert_operation(
        database_url, tenant, S.escalated, escalation_reason="request_budget_exhausted"
    )
    filters = {"state": "escalated", "reason": "provider_failure", "provider": "sandbox"}
    with login(base_url, _token(database_url, tenant, "ops", ALL)) as client:
        dry = client.get("/console/bulk", params={**filters, "option": "resume"})
        assert '<strong id="dry-run-count">3</strong>' in dry.text
        csrf = _csrf(dry.text)
        base = {**filters, "csrf": csrf, "option": "resume", "note": "outage over"}
        stale = client.post("/console/bulk", data={**base, "expected_count": "2"})
        assert stale.status_code == 409 and "now matches 3" in stale.text, stale.text[-600:]
        assert {load(database_url, op).state for op in outage} == {S.escalated}
        done = client.post("/console/bulk", data={**base, "expected_count": "3"})
        assert done.status_code == 200 and "Applied resume to 3 operations" in done.text
    for op in outage:
        with transaction(database_url) as session:
            last = store.events_for(session, op)[-1].draft
        assert (last.kind.value, last.actor, last.cause) == (
            "human_decision",
            "human:token:ops",
            "resume",
        )
        assert load(database_url, op).state is S.observing
    assert load(database_url, other).state is S.escalated


def test_the_stream_sends_the_current_version_then_ends_for_a_stopped_operation(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.escalated, escalation_reason="unknown_state")
    version = load(database_url, op).version
    with (
        login(base_url, _token(database_url, tenant, "ops", ["read"])) as client,
        client.stream("GET", f"/console/operations/{op}/stream") as answer,
    ):
        assert answer.headers["content-type"].startswith("text/event-stream")
        # sse-starlette ends lines with CRLF, one of the three the format allows.
        text = "".join(answer.iter_text()).replace("\r\n", "\n")
    assert text.startswith("retry: 3000\n\n")
    assert f'event: changed\ndata: {{"version": {version}, "state": "escalated"}}\n\n' in text
    assert text.endswith('event: end\ndata: {"state": "escalated", "ended": false}\n\n')


def test_the_console_shows_a_command_with_its_secrets_redacted(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(
        database_url,
        tenant,
        S.escalated,
        escalation_reason="unknown_state",
        command={"report": "q3", "api_key": "sk-live-123", "nested": {"password": "hunter2"}},
    )
    with login(base_url, _token(database_url, tenant, "ops", ["read"])) as client:
        html = client.get(f"/console/operations/{op}").text
    assert "q3" in html and "[redacted]" in html
    assert "sk-live-123" not in html and "hunter2" not in html
    assert uuid.UUID(str(op))


def test_every_viewer_of_a_running_operation_shares_one_poller_and_sees_its_change(
    database_url: str, base_url: str, console_app: Any
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.observing)
    version = load(database_url, op).version
    api = make_token(database_url, tenant, "api", ["cancel"])
    viewers = 4
    seen: list[list[int]] = [[] for _ in range(viewers)]
    first = threading.Barrier(viewers + 1, timeout=15)

    with login(base_url, _token(database_url, tenant, "ops", ["read"])) as client:
        cookies = dict(client.cookies)

    def watch(i: int) -> None:
        with (
            httpx.Client(base_url=base_url, timeout=15, cookies=cookies) as http,
            http.stream("GET", f"/console/operations/{op}/stream") as answer,
        ):
            event = None
            for line in answer.iter_lines():
                if line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: ") and event == "changed":
                    seen[i].append(json.loads(line.removeprefix("data: "))["version"])
                    if len(seen[i]) == 1:
                        first.wait()
                    else:
                        return

    threads = [threading.Thread(target=watch, args=(i,)) for i in range(viewers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    first.wait()  # every viewer has its first message: all are subscribed
    hub = console_app.state.console_hub
    assert hub.pollers() == 1
    with httpx.Client(base_url=base_url, timeout=15) as http:
        asked = http.post(f"/v1/operations/{op}/cancel", json={"reason": "x"}, headers=api)
        assert asked.status_code == 202, asked.text
    for t in threads:
        t.join(15)
    elapsed = time.monotonic() - started
    assert seen == [[version, version + 1]] * viewers
    # One read per second for all four viewers (plus the first), not one per viewer.
    assert hub.reads <= elapsed + 2, (hub.reads, elapsed)
    # Every viewer closed its stream: the server noticed (sse-starlette's disconnect
    # watch cancels the stream) and the last one out stopped the poller.
    from jobwarden.demo.harness import wait_for

    wait_for(lambda: hub.pollers() == 0, timeout=15, what="the poller to stop")


def test_a_console_form_sent_as_json_is_refused(database_url: str, base_url: str) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.escalated, escalation_reason="unknown_state")
    with login(base_url, _token(database_url, tenant, "ops", ALL)) as client:
        answer = client.post(f"/console/operations/{op}/decisions", json={"option": "abandon"})
    assert answer.status_code == 415 and "x-www-form-urlencoded" in answer.text
    assert load(database_url, op).state is S.escalated


def test_a_running_operation_is_cancelled_from_its_page_with_a_reason_recorded_as_theirs(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.observing)
    path = f"/console/operations/{op}"
    with login(base_url, _token(database_url, tenant, "alice", ALL)) as client:
        page = client.get(path).text
        assert f'action="{path}/cancel"' in page and 'id="cancel-reason"' in page
        csrf = _csrf(page)
        before = load(database_url, op)
        for blank in ("", "   "):
            refused = client.post(f"{path}/cancel", data={"csrf": csrf, "reason": blank})
            assert refused.status_code == 422 and "reason: a cancel needs a reason" in refused.text
        missing = client.post(f"{path}/cancel", data={"csrf": csrf})
        assert missing.status_code == 422 and "reason:" in missing.text
        assert load(database_url, op).version == before.version
        done = client.post(f"{path}/cancel", data={"csrf": csrf, "reason": "customer withdrew"})
        assert (done.status_code, done.headers["location"]) == (303, f"{path}?done=cancel")
        assert "Recorded: cancel." in client.get(done.headers["location"]).text
    row = load(database_url, op)
    assert (row.state, row.cancel_reason, row.cancel_requested_by) == (
        S.cancel_requested,
        "customer withdrew",
        "token:alice",
    )
    with transaction(database_url) as session:
        last = store.events_for(session, op)[-1].draft
    assert (last.kind.value, last.actor) == ("cancel_requested", "human:token:alice")


def test_a_cancel_without_the_session_csrf_token_or_the_cancel_scope_is_refused(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.observing)
    before = load(database_url, op)
    path = f"/console/operations/{op}"
    with login(base_url, _token(database_url, tenant, "alice", ALL)) as client:
        for csrf in ("", "not-the-token"):
            answer = client.post(f"{path}/cancel", data={"csrf": csrf, "reason": "stop"})
            assert answer.status_code == 403 and "csrf" in answer.text
    # The HTTP cancel's scope: a reader sees no form, and its POST is refused.
    reader = ["read", "approve", "decide"]
    with login(base_url, _token(database_url, tenant, "reader", reader)) as client:
        page = client.get(path).text
        assert 'id="cancel-reason"' not in page
        answer = client.post(f"{path}/cancel", data={"csrf": _csrf(page), "reason": "stop"})
        assert answer.status_code == 403 and "lacks the &#39;cancel&#39; scope" in answer.text
    after = load(database_url, op)
    assert (after.version, after.state) == (before.version, before.state)


def test_an_ended_operation_offers_no_cancel_and_a_cancel_posted_anyway_is_a_409(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.succeeded)
    before = load(database_url, op)
    path = f"/console/operations/{op}"
    with login(base_url, _token(database_url, tenant, "alice", ALL)) as client:
        page = client.get(path).text
        assert f'action="{path}/cancel"' not in page
        answer = client.post(f"{path}/cancel", data={"csrf": _csrf(page), "reason": "late"})
        assert answer.status_code == 409
        assert "the operation has ended (succeeded)" in answer.text
    assert load(database_url, op).version == before.version


def test_an_operation_awaiting_approval_cancelled_from_the_console_ends_abandoned(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.awaiting_approval)
    path = f"/console/operations/{op}"
    with login(base_url, _token(database_url, tenant, "alice", ALL)) as client:
        csrf = _page_csrf(client, path)
        done = client.post(f"{path}/cancel", data={"csrf": csrf, "reason": "not tonight"})
        assert done.status_code == 303, done.text
    assert load(database_url, op).state is S.abandoned


def test_a_finished_operation_shows_its_result_and_downloads_it_under_the_session(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    data = pattern(70_000)
    op, _ = operation_with_result(database_url, tenant, data)
    with transaction(database_url) as session:
        session.execute(
            text("UPDATE operation_results SET record_count = 42 WHERE operation_id = :op"),
            {"op": op},
        )
    digest = hashlib.sha256(data).hexdigest()
    with login(base_url, _token(database_url, tenant, "ops", ["read"])) as client:
        html = client.get(f"/console/operations/{op}").text
        block = html[html.index('id="result"') :]
        assert f'<code id="result-digest">{digest}</code>' in block
        assert "68.4 KiB (70000 bytes)" in block and '<dd id="result-items">42</dd>' in block
        assert '<dd id="result-validated">validated</dd>' in block
        assert f'href="/console/operations/{op}/result"' in block
        got = client.get(f"/console/operations/{op}/result")
        assert got.status_code == 200 and got.content == data
        assert got.headers["repr-digest"].startswith("sha-256=")
        assert got.headers["content-disposition"] == f'attachment; filename="{op}.result"'
        assert got.headers["jobwarden-result-validated"] == "true"
        ranged = client.get(f"/console/operations/{op}/result", headers={"Range": "bytes=0-9"})
        assert ranged.status_code == 206 and ranged.content == data[:10]
        # Still running: no result block, and the link's route names the state.
        running = insert_operation(database_url, tenant, S.observing)
        assert 'id="result"' not in client.get(f"/console/operations/{running}").text
        none = client.get(f"/console/operations/{running}/result")
        assert none.status_code == 404 and "observing: it has no result" in none.text
        assert none.headers["content-type"].startswith("text/html")
    # The same authorisation as the API: another tenant's session finds nothing, and
    # without a session the download is a redirect to the login.
    with login(base_url, _token(database_url, tenant_name(), "ops", ["read"])) as other:
        assert other.get(f"/console/operations/{op}/result").status_code == 404
    with httpx.Client(base_url=base_url) as anonymous:
        answer = anonymous.get(f"/console/operations/{op}/result")
        assert (answer.status_code, answer.headers.get("location")) == (303, "/console/login")


def _deadline_cells(html: str) -> dict[str, str]:
    rows = re.findall(r'<tr data-deadline="([^"]+)">.*?<td>([^<]*)</td></tr>', html)
    return dict(rows)


def test_a_met_deadline_reads_as_met_not_as_a_countdown(database_url: str, base_url: str) -> None:
    tenant = tenant_name()
    accepted = NOW + timedelta(seconds=30)
    observing = insert_operation(database_url, tenant, S.observing, accepted_at=accepted)
    ended = insert_operation(
        database_url,
        tenant,
        S.succeeded,
        accepted_at=accepted,
        collect_deadline=NOW + timedelta(minutes=30),
    )
    # insert_operation records its intent entering the state given (succeeded at NOW).
    with login(base_url, _token(database_url, tenant, "ops", ["read"])) as client:
        running = _deadline_cells(client.get(f"/console/operations/{observing}").text)
        done = _deadline_cells(client.get(f"/console/operations/{ended}").text)
    # Created at NOW with a 5 min create deadline, accepted 30 s in: met 4.5 min early.
    assert running["create"] == "met, 4 min before it"
    assert running["result"].endswith("left")
    assert done["create"] == "met, 4 min before it"
    assert done["result"] == "met, 60 min before it"
    assert done["collect"] == "met, 30 min before it"
    assert done["next poll"] == "-"


def test_the_approval_shows_the_body_indented_and_wrapped_and_the_bytes_it_binds(
    database_url: str, base_url: str
) -> None:
    tenant = tenant_name()
    command = {"kind": "payout", "payee": "ACME GmbH " * 8, "amount": "12345.67"}
    op = insert_operation(
        database_url, tenant, S.awaiting_approval, requested_by="token:bob", command=command
    )
    with login(base_url, _token(database_url, tenant, "carol", ALL)) as client:
        html = client.get(f"/console/operations/{op}").text
    readable = re.search(r'<pre class="wrapped" id="request-body-readable">(.*?)</pre>', html, re.S)
    sent = re.search(r'<pre class="wrapped" id="request-body">(.*?)</pre>', html, re.S)
    assert readable is not None and sent is not None, html
    # One key a line: the amount never scrolls out of view behind a long payee.
    assert "\n  &#34;amount&#34;: &#34;12345.67&#34;" in readable.group(1)
    assert "\n" not in sent.group(1).strip() and "12345.67" in sent.group(1)


def test_every_page_declares_a_viewport_for_phones(database_url: str, base_url: str) -> None:
    with httpx.Client(base_url=base_url) as client:
        html = client.get("/console/login").text
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html


def test_the_api_builds_alone_and_the_served_app_installs_the_console(base_url: str) -> None:
    # The arrow points one way (issue 35): the console installs itself on the API's app;
    # the API never imports the console, and jobwarden serve runs the composed app.
    from jobwarden.api.app import create_app as create_api
    from jobwarden.cli import serve

    assert httpx.get(f"{base_url}/console/login", timeout=30).status_code == 200
    with serving(create_api()) as api:
        assert httpx.get(f"{api}/console/login", timeout=30).status_code == 404
        assert httpx.get(f"{api}/healthz", timeout=30).status_code == 200
    assert "jobwarden.console.app:create_app" in Path(serve.__file__).read_text(encoding="utf-8")
