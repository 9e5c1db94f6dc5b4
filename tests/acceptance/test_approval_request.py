"""A human approves exactly what will be sent (invariant 13): the approval page's request
is compared, header by header and byte by byte, with what the sandbox provider received.

The console is read over HTTP (as tests/integration/test_console.py does), the API's
``create_request`` beside it; the approval is given through the console's own form, and
real workers send the create.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from jobwarden.demo.harness import Stack, wait_for
from jobwarden.demo.sandbox.server import SandboxServer
from jobwarden.models.history.excerpts import REDACTED
from jobwarden.models.provider.outgoing import NEW_PER_REQUEST
from tests.acceptance.conftest import TOKEN, Pipeline
from tests.api_server import serving
from tests.integration.api_helpers import make_token

_ROW = re.compile(r'<tr data-header="[^"]*"><th>([^<]*)</th><td><code>([^<]*)</code></td></tr>')


@pytest.fixture(scope="module")
def console_url(worker_env: dict[str, str]) -> Iterator[str]:
    from jobwarden.console.app import create_app

    with serving(create_app()) as url:
        yield url


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page
    return found.group(1)


def _one(pattern: str, page: str) -> str:
    found = re.search(pattern, page, re.DOTALL)
    assert found is not None, pattern
    return html.unescape(found.group(1))


def _shown_on_the_page(page: str) -> dict[str, Any]:
    """The request exactly as the approval section renders it."""
    approval = _one(r'(<section class="approval".*?</section>)', page)
    method, url = _one(r'<code id="request-line">([^<]*)</code>', approval).split(" ", 1)
    return {
        "method": method,
        "url": url,
        "headers": {html.unescape(n): html.unescape(v) for n, v in _ROW.findall(approval)},
        "body": _one(r'<pre class="wrapped" id="request-body">(.*?)</pre>', approval),
    }


def test_the_approval_page_shows_the_create_exactly_as_the_provider_receives_it(
    stack: Stack, pipeline: Pipeline, console_url: str, database_url: str
) -> None:
    command = {"kind": "export", "behaviour": {"polls_to_finish": 1}, "note": "ünïcode & <tags>"}
    op = pipeline.submit(provider="sandbox_approval", command=command)
    assert pipeline.row(op).state == "awaiting_approval"
    auth = make_token(database_url, "acceptance", "approver", ["read", "approve"])
    with httpx.Client(base_url=console_url, timeout=30) as client:
        api = client.get(f"/v1/operations/{op}", headers=auth)
        assert api.status_code == 200, api.text
        form = client.get("/console/login")
        token = auth["Authorization"].split()[1]
        logged = client.post("/console/login", data={"csrf": _csrf(form.text), "token": token})
        assert logged.status_code == 303, logged.text
        page = client.get(f"/console/operations/{op}").text
        shown = _shown_on_the_page(page)
        approved = client.post(
            f"/console/operations/{op}/approvals",
            data={"csrf": _csrf(page), "fingerprint": pipeline.row(op).request_fingerprint},
        )
        assert approved.status_code == 303, approved.text
    # The HTTP API (and MCP's get_operation, its same view) shows what the page shows.
    field = api.json()["create_request"]
    assert {k: field[k] for k in ("method", "url", "headers", "body")} == shown
    assert field["fingerprint"] == pipeline.row(op).request_fingerprint
    assert TOKEN not in page and TOKEN not in api.text

    assert pipeline.wait_state(op).state == "succeeded"
    (received,) = [r for r in pipeline.sent_creates(op)]
    url = urlsplit(shown["url"])
    assert (received["method"], received["path"]) == (shown["method"], url.path)
    assert base64.b64decode(received["body_b64"]) == shown["body"].encode()
    wire = {name.lower(): value for name, value in received["headers"]}
    assert wire.pop("host") == url.netloc
    assert int(wire.pop("content-length")) == len(shown["body"].encode())
    assert wire.pop("connection") == "keep-alive"
    expected = {name.lower(): value for name, value in shown["headers"].items()}
    # The credential: the same header, its value the shown one with the secret in place.
    credential = expected.pop("authorization")
    assert credential == f"Bearer {REDACTED}"
    digest = hashlib.sha256(credential.replace(REDACTED, TOKEN).encode()).hexdigest()
    assert wire.pop("authorization") == f"sha256:{digest}"
    # traceparent's parent id is new per request (W3C Trace Context section 3.2.2.3).
    before, after = expected.pop("traceparent").split(NEW_PER_REQUEST)
    sent_parent = wire.pop("traceparent")
    assert sent_parent.startswith(before) and sent_parent.endswith(after)
    assert len(sent_parent) == len(before) + 16 + len(after)
    # Every other header, byte for byte, and none more or fewer.
    assert wire == expected


def test_a_create_whose_base_url_changed_after_its_approval_never_leaves(
    stack: Stack, pipeline: Pipeline, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33 finding 3, with real workers: the approver's API process was started when
    ``JOBWARDEN_SANDBOX_URL`` (the contract's ``base_url_env``) named another provider; it
    shows and binds ``POST <old>/v1/jobs``. The workers, started with the current URL,
    would send elsewhere: nothing leaves, to either, and a new approval is needed."""
    from jobwarden.config.settings import Settings
    from jobwarden.console.app import create_app

    op = pipeline.submit(provider="sandbox_approval", command={"kind": "export"})
    auth = make_token(database_url, "acceptance", "approver", ["read", "approve"])
    with SandboxServer(token=TOKEN) as old:
        monkeypatch.setenv("JOBWARDEN_SANDBOX_URL", old.url)
        with serving(create_app(Settings())) as api, httpx.Client(base_url=api, timeout=30) as c:
            shown = c.get(f"/v1/operations/{op}", headers=auth).json()["create_request"]
            assert shown["url"] == f"{old.url}/v1/jobs"
            body = {"fingerprint": shown["fingerprint"], "request_digest": shown["request_digest"]}
            approved = c.post(f"/v1/operations/{op}/approvals", json=body, headers=auth)
            assert approved.status_code == 200, approved.text
        wait_for(lambda: "approval_stale" in pipeline.kinds(op), timeout=30, what="approval_stale")
        assert old.requests() == []
    assert pipeline.sent_creates(op) == []
    assert pipeline.row(op).state == "awaiting_approval"
    stale = [e.draft for e in pipeline.events(op) if e.draft.kind.value == "approval_stale"]
    assert stale[0].excerpt is not None
    assert stale[0].excerpt["approved_request_digest"] == shown["request_digest"]
    assert stale[0].excerpt["request"].endswith(f"{urlsplit(pipeline.sandbox.url).netloc}/v1/jobs")
