"""Issue 34: a success needs its evidence, only followed URLs are checked, relative URLs
resolve, a DELETE keeps its final body, and monitor URLs up to 16 KiB are accepted.

Each test is one route shape that the code before issue 34 got wrong. Sources: [ARM] ARM
RPC "Asynchronous operations" (azure-mgmt-core BodyContentPolling: "does not contain a
body"), [LRO] Azure REST API Guidelines "Long-running operations", [RFC3986-5] RFC 3986
section 5 (reference resolution), [RFC9110-15.3.5] 204 No Content.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobwarden.models.actions import Accept, Collect, Escalate, ProviderRequest
from jobwarden.models.actions import RequestPurpose as P
from jobwarden.models.conventions.urls import MAX_HEADER, received_url
from jobwarden.models.provider.requests import create_request
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import after_create, after_poll
from tests.unit.factories import NOW, context, operation, reply

ARM = context("azure_arm")
BASE = ARM.base_url
SUB = "00000000-0000-0000-0000-000000000000"
ORDER = {
    "subscription": SUB,
    "resource_group": "test-rg",
    "namespace": "Azure.ResourceManager.OperationTemplates",
    "type": "orders",
    "name": "order1",
    "api_version": "2023-12-01-preview",
    "resource": {"location": "eastus", "properties": {"productId": "product1"}},
}
V = "?api-version=2023-12-01-preview"
ORDER_URL = (
    f"{BASE}/subscriptions/{SUB}/resourceGroups/test-rg/providers/"
    f"Azure.ResourceManager.OperationTemplates/orders/order1{V}"
)
AAO = f"{BASE}/subscriptions/{SUB}/providers/p/locations/eastus/operations/aao"
LOC = f"{BASE}/subscriptions/{SUB}/providers/p/locations/eastus/operations/loc"
DELETE = {**ORDER, "action": "delete"}
PATCH = {**ORDER, "action": "update"}


def _create(command: dict[str, Any], answer: Any) -> Any:
    op = operation(S.create_pending, command=command, provider="azure_arm", create_attempts=1)
    return after_create(op, ARM, create_request(ARM, op), answer, NOW, 0.5).action


def _poll(command: dict[str, Any], mode: str, url: str, answer: Any) -> Any:
    op = operation(
        S.observing,
        command=command,
        provider="azure_arm",
        status_url=url,
        polling_mode=mode,
        accepted_at=NOW,
        status_requests_used=1,
    )
    request = ProviderRequest(purpose=P.status, method="GET", url=url)
    return after_poll(op, ARM, request, answer, NOW + timedelta(seconds=5), 0.5)


# --- 1. a success needs its evidence ------------------------------------------------------


def test_a_put_whose_resource_answers_200_without_a_body_is_never_a_success() -> None:
    # The regression of issue 34: 201 without provisioningState, then 200 with no body.
    accepted = _create(ORDER, reply(201, {"id": "/x", "properties": {}}))
    assert isinstance(accepted, Accept) and accepted.polling_mode == "resource"
    after = _poll(ORDER, "resource", ORDER_URL, reply(200, None, content_type=None))
    assert isinstance(after.action, Escalate), after.action
    assert after.action.reason.value == "contract_violation"
    assert after.action.detail.startswith("succeeded_without_evidence")


def test_a_put_answered_200_without_a_resource_body_is_never_done() -> None:
    action = _create(ORDER, reply(200, None))
    assert isinstance(action, Accept) and isinstance(action.then, Escalate)
    assert action.then.detail.startswith("succeeded_without_evidence")


def test_a_put_answered_200_with_bytes_that_are_not_json_is_never_done() -> None:
    # Read as a create whose outcome is unknown (reconciled with the same token).
    action = _create(ORDER, reply(200, None, body_problem="malformed_json"))
    assert not isinstance(action, Accept)
    assert getattr(action, "to", None) is S.create_unknown


def test_a_post_whose_location_answers_200_without_a_body_is_never_a_success() -> None:
    command = {**ORDER, "action": "resource-action", "operation": "export", "parameters": {}}
    after = _poll(command, "location", LOC + V, reply(200, None))
    assert isinstance(after.action, Escalate)
    assert "succeeded_without_evidence" in after.action.detail


POST_ACTION = {**ORDER, "action": "resource-action", "operation": "export", "parameters": {}}


@pytest.mark.parametrize(
    ("command", "mode", "url"),
    [
        (ORDER, "location", LOC + V),
        (PATCH, "location", LOC + V),
        (POST_ACTION, "location", LOC + V),
        (ORDER, "resource", ORDER_URL),
        # EVIDENCE_RULES: a DELETE ends with JSON or nothing; bytes that are not JSON are
        # neither (azure-core would not read them: stopping costs a human look, never a
        # wrong success, and retrying would only spend the transport budget).
        (DELETE, "location", LOC + V),
    ],
    ids=[
        "PUT via Location",
        "PATCH via Location",
        "POST via Location",
        "PUT via resource",
        "DELETE via Location",
    ],
)
@pytest.mark.parametrize("problem", ["malformed_json", "undecodable"])
def test_a_final_answer_that_is_not_json_stops_at_once_instead_of_being_retried(
    command: dict[str, Any], mode: str, url: str, problem: str
) -> None:
    # [ARM] LocationPolling / BodyContentPolling: a 200 is the end, and its body the
    # result; azure-core raises at once (DecodeError) and never polls it again.
    after = _poll(command, mode, url, reply(200, None, body_problem=problem))
    assert isinstance(after.action, Escalate), after.action
    assert after.action.reason.value == "contract_violation"
    assert after.action.detail.startswith("succeeded_without_evidence")
    assert "transport_failures_used" not in after.changes


def test_a_status_monitor_answer_that_is_not_json_is_still_retried() -> None:
    # Its state is in its body: unread, the operation is not known to be done.
    after = _poll(ORDER, "status_monitor", AAO, reply(200, None, body_problem="malformed_json"))
    assert not isinstance(after.action, Escalate)
    assert after.changes.get("transport_failures_used") == 1


# --- 2. only what is followed is checked ----------------------------------------------------


@pytest.mark.parametrize("command", [ORDER, DELETE], ids=["PUT", "DELETE"])
@pytest.mark.parametrize("junk", ["https://evil.example/loc", "not a url\t", "x" * 70_000])
def test_a_junk_location_beside_a_valid_monitor_is_ignored(
    command: dict[str, Any], junk: str
) -> None:
    answer = reply(202, None, headers={"azure-asyncoperation": AAO, "location": junk})
    op = operation(S.create_pending, command=command, provider="azure_arm", create_attempts=1)
    decided = after_create(op, ARM, create_request(ARM, op), answer, NOW, 0.5)
    assert isinstance(decided.action, Accept), decided.action
    assert decided.action.status_url == AAO + V
    assert decided.action.final_url is None
    assert decided.seen["ignored"]["location"] == received_url(junk.strip())
    assert len(decided.seen["ignored"]["location"]) <= 210


def test_a_patch_done_in_its_first_answer_ignores_a_monitor_on_another_origin() -> None:
    body = {"id": "/x", "properties": {"provisioningState": "Succeeded"}}
    headers = {"azure-asyncoperation": "https://elsewhere.example/op"}
    action = _create(PATCH, reply(200, body, headers=headers))
    assert isinstance(action, Accept) and isinstance(action.then, Collect)
    assert action.then.expected["final"] == "body" and action.then.expected["inline"] == body


def test_a_location_that_a_delete_never_requests_does_not_stop_its_monitor() -> None:
    answer = reply(200, {"status": "InProgress"}, headers={"location": "https://evil.example/x"})
    after = _poll(DELETE, "status_monitor", AAO + V, answer)
    assert not isinstance(after.action, Escalate), after.action
    assert "result_reference" not in after.changes


# --- 3. relative URLs resolve against the request that returned them ------------------------


def test_a_relative_monitor_url_resolves_against_the_create_url() -> None:
    relative = f"/subscriptions/{SUB}/providers/p/locations/eastus/operations/aao"
    action = _create(ORDER, reply(201, {}, headers={"azure-asyncoperation": relative}))
    assert isinstance(action, Accept) and action.status_url == AAO + V


def test_a_relative_location_resolves_against_the_monitor_that_named_it() -> None:
    command = {**ORDER, "action": "resource-action", "operation": "export", "parameters": {}}
    answer = reply(200, {"status": "Running"}, headers={"location": "loc"})
    after = _poll(command, "status_monitor", AAO + V, answer)
    assert after.changes["result_reference"] == LOC + V


def test_a_refused_relative_url_is_shown_as_received() -> None:
    action = _create(ORDER, reply(201, {}, headers={"azure-asyncoperation": "//evil.example/op"}))
    assert isinstance(action, Escalate)
    assert "'azure-asyncoperation'" in action.detail and "//evil.example/op" in action.detail
    assert "://evil" not in action.detail.replace("//evil.example/op", "")


# --- 4. a DELETE's final body is its result ---------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"properties": {"provisioningState": "Succeeded"}},
        {"properties": {"provisioningState": "Canceled"}},
        [{"name": "a"}],
    ],
)
def test_a_delete_whose_location_ends_with_a_body_keeps_it_as_the_result(body: object) -> None:
    after = _poll(DELETE, "location", LOC + V, reply(200, body))
    assert isinstance(after.action, Collect)
    assert after.action.expected["final"] == "body" and after.action.expected["inline"] == body


@pytest.mark.parametrize("code", [200, 204])
def test_a_delete_whose_location_ends_without_a_body_has_no_result(code: int) -> None:
    after = _poll(DELETE, "location", LOC + V, reply(code, None))
    assert isinstance(after.action, Collect) and after.action.expected["final"] == "none"


# --- large headers ------------------------------------------------------------------------------


def test_a_monitor_url_of_six_kib_is_followed() -> None:
    # Microsoft's LargeHeaders_two6k: both monitor headers carry 6 KiB of userContext.
    big = "?userContext=" + "a" * 6 * 1024
    headers = {"azure-asyncoperation": AAO + big, "location": LOC + big}
    command = {**ORDER, "action": "resource-action", "operation": "two6k", "parameters": {}}
    action = _create(command, reply(202, None, headers=headers))
    assert isinstance(action, Accept), action
    assert action.status_url is not None and action.status_url.startswith(AAO + big)
    assert action.job_id is not None and len(action.job_id) <= 500


def test_a_monitor_url_over_the_bound_is_refused_naming_the_header_and_its_size() -> None:
    url = AAO + "?userContext=" + "a" * MAX_HEADER
    action = _create(ORDER, reply(201, {}, headers={"azure-asyncoperation": url}))
    assert isinstance(action, Escalate)
    assert f"header 'azure-asyncoperation' is {len(url)} characters" in action.detail
    assert f"above the {MAX_HEADER}-character bound" in action.detail


def test_a_huge_location_is_kept_bounded_in_the_history() -> None:
    from jobwarden.models.history.excerpts import HEADER_LIMIT, excerpt

    junk = "https://evil.example/" + "x" * 70_000
    answer = reply(202, None, headers={"azure-asyncoperation": AAO, "location": junk})
    shown = excerpt(answer)["headers"]["location"]
    assert len(shown) < HEADER_LIMIT + 40 and shown.endswith(f"({len(junk)} chars)")
