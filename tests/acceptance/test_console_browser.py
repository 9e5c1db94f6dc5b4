"""The operators' console in a real browser: Debian's headless Chromium driven by
Playwright, against the API process on a real uvicorn, real Celery workers and the
sandbox provider. The browser is /usr/bin/chromium (never a downloaded one); one browser
serves the whole module, a fresh context (cookies) per test.

Each test saves full-page screenshots of its pages into the folder named by
JOBWARDEN_SCREENSHOT_DIR when set (for a person to look at), else the test's tmp_path.
Conventions: server-sent events (WHATWG HTML §9.2) keep the operation page live;
Retry-After (RFC 9110 §10.2.3) windows are shaded on the timeline.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from tests.api_server import serving
from tests.integration.api_helpers import make_token

pytestmark = pytest.mark.usefixtures("stack")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ALL = ["read", "submit", "cancel", "approve", "decide"]
# Long enough for a worker to take a message and the sandbox to answer a few polls.
SETTLE_MS = 30_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (scripts/test does, as root)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def console_url(worker_env: dict[str, str]) -> Iterator[str]:
    from jobwarden.console.app import create_app

    with serving(create_app()) as url:
        yield url


@pytest.fixture
def tenant() -> str:
    return f"console-{secrets.token_hex(4)}"


@pytest.fixture
def page(browser: Any, console_url: str, database_url: str, tenant: str) -> Iterator[Any]:
    """A logged-in console page for an operator of ``tenant`` (not the submitter)."""
    token = make_token(database_url, tenant, "operator", ALL)["Authorization"].split()[1]
    context = browser.new_context(base_url=console_url, viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(SETTLE_MS)
    tab.goto("/console/login")
    tab.fill("#token", token)
    tab.click("#login")
    tab.wait_for_url("**/console/")
    yield tab
    context.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where this test's screenshots go (JOBWARDEN_SCREENSHOT_DIR, kept by tests/conftest.py)."""
    named = os.environ.get("JOBWARDEN_SCREENSHOT_DIR")
    folder = Path(named) if named else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shot(tab: Any, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    tab.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    return path


def submit(tenant: str, behaviour: dict[str, Any], **limits: Any) -> str:
    from jobwarden.tasks.intake import submit_operation

    result = submit_operation(
        tenant=tenant,
        provider=limits.pop("provider", "sandbox"),
        idempotency_key=secrets.token_hex(8),
        command={"kind": "export", "behaviour": behaviour},
        requested_by="pytest",
        **limits,
    )
    assert result.operation_id is not None, result
    return result.operation_id


def state_of(database_url: str, op_id: str) -> str:
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import transaction

    with transaction(database_url) as session:
        row = store.load(session, uuid.UUID(op_id))
    assert row is not None
    return row.state.value


def remote_job_of(database_url: str, op_id: str) -> str:
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import transaction

    with transaction(database_url) as session:
        row = store.load(session, uuid.UUID(op_id))
    assert row is not None and row.remote_job_id is not None
    return row.remote_job_id


def wait_state(database_url: str, op_id: str, state: str) -> None:
    from jobwarden.demo.harness import wait_for

    wait_for(lambda: state_of(database_url, op_id) == state, timeout=30, what=f"{op_id} {state}")


def test_an_escalated_operation_is_extended_from_the_queue_and_its_page_shows_polling_resume(
    page: Any, database_url: str, tenant: str, shots: Path
) -> None:
    op = submit(tenant, {"polls_to_finish": 7}, max_status_requests=4)
    wait_state(database_url, op, "escalated")
    page.reload()
    shot(page, shots, "needs_a_human_queue")
    group = page.locator('section[data-reason="request_budget_exhausted"]')
    assert group.locator(".count").inner_text() == "1"
    assert (
        "request_budget_exhausted"
        in group.locator(f'tr[data-operation="{op}"] .story').inner_text()
    )
    group.locator(f'a[href="/console/operations/{op}"]').click()
    page.wait_for_url(f"**/console/operations/{op}")
    extend = page.locator('button[data-option="extend"]')
    assert extend.inner_text() == "extend once: +15 min, +4 checks"
    assert page.locator('tr[data-counter="status requests"] td').nth(1).inner_text() == "4 of 4"
    page.fill("#note", "the export is slow today; one more look")
    extend.click()
    page.wait_for_url(f"**/console/operations/{op}?done=extend")
    assert "Recorded: extend." in page.locator("#done").inner_text()
    # The new bounds, then the resumed polling arriving over the live stream (no reload):
    # three more status requests, and the job's success.
    page.locator("#state", has_text="succeeded").wait_for()
    assert page.locator('tr[data-counter="status requests"] td').nth(1).inner_text() == "7 of 8"
    story = page.locator("#story").inner_text()
    assert "human:token:operator" in story and "status request 7/8" in story
    # The page changed under the operator's eyes, without a reload: the live stream did it.
    assert int(page.locator("#live").get_attribute("data-refreshed") or 0) >= 1
    assert "stopped: request_budget_exhausted" in (page.locator("#timeline").inner_html())
    assert "chain verified" in page.locator("#chain").inner_text()
    shot(page, shots, "operation_extended")


def test_an_approval_page_shows_what_is_approved_and_approves_the_operation(
    page: Any, database_url: str, tenant: str, shots: Path
) -> None:
    op = submit(tenant, {"polls_to_finish": 1}, provider="sandbox_approval")
    wait_state(database_url, op, "awaiting_approval")
    page.goto(f"/console/operations/{op}")
    approval = page.locator("#approval")
    fingerprint = page.locator("#fingerprint").inner_text()
    text = approval.inner_text()
    # The provider's create route on its base URL, not jobwarden's own intake route.
    create_url = os.environ["JOBWARDEN_SANDBOX_URL"] + "/v1/jobs"
    assert page.locator("#request-line").inner_text() == f"POST {create_url}"
    headers = page.locator("#request-headers").inner_text()
    assert "Authorization" in headers and "Bearer [redacted]" in headers
    # Indented and wrapped for reading; the exact bytes the digest binds one click away.
    readable = page.locator("#request-body-readable")
    assert '\n  "kind": "export"' in readable.inner_text()
    assert readable.evaluate("e => e.scrollWidth <= e.clientWidth")
    assert '"kind":"export"' in (page.locator("#request-body").text_content() or "")
    assert fingerprint in text and "valid until" in text and "once" in text
    assert "left" in page.locator("#approval-window").inner_text()
    assert '"kind": "export"' in page.locator("#command").inner_text()
    shot(page, shots, "approval-page")
    page.click("#approve")
    page.wait_for_url(f"**/console/operations/{op}?done=approved")
    page.locator("#state", has_text="succeeded").wait_for()
    assert "approved" in page.locator("#story").inner_text()
    shot(page, shots, "approval-approved")


def test_a_bulk_resume_shows_its_dry_run_count_then_resumes_each_operation(
    page: Any, database_url: str, tenant: str, shots: Path
) -> None:
    behaviour = {"polls_to_finish": 1, "status_errors": [{"code": 500, "count": 2}]}
    ops = [submit(tenant, behaviour, max_transport_failures=1) for _ in range(3)]
    for op in ops:
        wait_state(database_url, op, "escalated")
    page.goto("/console/bulk")
    page.select_option('select[name="reason"]', "provider_failure")
    page.fill('input[name="provider"]', "sandbox")
    page.select_option('select[name="option"]', "resume")
    page.click("#dry-run")
    assert page.locator("#dry-run-count").inner_text() == "3"
    shot(page, shots, "bulk_dry_run")
    page.fill("#note", "provider outage over")
    page.click("#apply")
    assert "Applied resume to 3 operations; skipped 0." in page.locator("#bulk-result").inner_text()
    shot(page, shots, "bulk_applied")
    for op in ops:
        wait_state(database_url, op, "succeeded")


def test_the_timeline_of_a_503_with_retry_after_shades_the_window_with_no_request_inside(
    page: Any, database_url: str, tenant: str, shots: Path
) -> None:
    behaviour = {
        "polls_to_finish": 2,
        "status_errors": [{"code": 503, "count": 1, "retry_after": 2}],
    }
    op = submit(tenant, behaviour)
    wait_state(database_url, op, "succeeded")
    # Found by its remote job id through the search page, as an operator would.
    remote_job_id = remote_job_of(database_url, op)
    page.goto("/console/search")
    page.fill('input[name="remote_job_id"]', remote_job_id)
    page.click("#search")
    assert page.locator("#results tbody tr").count() == 1
    shot(page, shots, "search_by_remote_job")
    page.click(f'#results a[href="/console/operations/{op}"]')
    page.wait_for_url(f"**/console/operations/{op}")
    window = page.locator("#timeline svg rect.retry-after")
    assert window.count() == 1
    box = window.bounding_box()
    ticks = page.locator("#timeline svg line.request")
    xs = [ticks.nth(i).bounding_box()["x"] + 1.5 for i in range(ticks.count())]  # stroke 3
    assert page.locator("#timeline svg line.request.outcome-server_error").count() == 1
    inside = [x for x in xs if box["x"] + 0.5 < x < box["x"] + box["width"] - 0.5]
    assert len(xs) >= 3 and inside == [], (box, xs)
    assert page.locator('#timeline g.wait[data-delay-source="provider_retry_after"]').count() == 1
    assert page.locator("#timeline g.deadline").count() == 1
    assert "budget:" in (page.locator("#timeline text.budget").text_content() or "")
    page.locator("#timeline").scroll_into_view_if_needed()
    shot(page, shots, "timeline_retry_after")


def test_a_running_operation_is_cancelled_from_its_page_and_the_provider_confirms(
    page: Any, database_url: str, tenant: str, shots: Path
) -> None:
    # Many polls to finish: it is still running when the operator cancels it.
    op = submit(tenant, {"polls_to_finish": 1000}, max_status_requests=1000)
    wait_state(database_url, op, "observing")
    page.goto(f"/console/operations/{op}")
    form = page.locator("#cancel")
    assert "Cancel" in form.inner_text()
    # The reason is required: the browser itself refuses an empty one, nothing is sent.
    page.click("#cancel-operation")
    assert page.url.endswith(f"/console/operations/{op}")
    assert state_of(database_url, op) == "observing"
    page.fill("#cancel-reason", "the customer withdrew the export")
    form.scroll_into_view_if_needed()
    shot(page, shots, "cancel-form")
    page.click("#cancel-operation")
    page.wait_for_url(f"**/console/operations/{op}?done=cancel")
    assert "Recorded: cancel." in page.locator("#done").inner_text()
    # The worker asks the provider; its confirmation arrives over the live stream.
    page.locator("#state", has_text="cancelled").wait_for()
    # Ended: the stream's end takes the cancel form away without a reload.
    page.locator("#cancel").wait_for(state="detached")
    story = page.locator("#story").inner_text()
    assert "human:token:operator" in story and "the customer withdrew the export" in story
    shot(page, shots, "cancel-recorded")
    page.reload()
    assert page.locator("#cancel").count() == 0


def test_a_finished_operation_shows_its_result_downloads_it_and_fits_a_phone(
    page: Any, browser: Any, console_url: str, database_url: str, tenant: str, shots: Path
) -> None:
    op = submit(tenant, {"polls_to_finish": 1})
    wait_state(database_url, op, "succeeded")
    page.goto(f"/console/operations/{op}")
    result = page.locator("#result")
    digest = page.locator("#result-digest").inner_text()
    assert len(digest) == 64 and "validated" in page.locator("#result-validated").inner_text()
    # Met deadlines say so; none of them counts down on a finished operation.
    for name in ("create", "result", "collect"):
        cell = page.locator(f'tr[data-deadline="{name}"] td').nth(2).inner_text()
        assert cell.startswith("met, ") and cell.endswith(" before it"), (name, cell)
    assert page.locator('tr[data-deadline="next poll"] td').nth(2).inner_text() == "-"
    with page.expect_download() as started:
        page.click("#result-download")
    saved = Path(started.value.path())
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == digest
    result.scroll_into_view_if_needed()
    shot(page, shots, "operation_finished_result")
    # The same page on a phone (390 CSS px): nothing makes the page wider than the screen.
    cookies = page.context.cookies()
    phone = browser.new_context(
        base_url=console_url, viewport={"width": 390, "height": 844}, device_scale_factor=2
    )
    try:
        phone.add_cookies(cookies)
        small = phone.new_page()
        small.goto(f"/console/operations/{op}")
        assert small.locator("#result-digest").inner_text() == digest
        width = small.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, width
        shot(small, shots, "operation_finished_phone")
    finally:
        phone.close()
