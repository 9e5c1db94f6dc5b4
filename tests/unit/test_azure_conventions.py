"""The Azure conventions' rules, one table row per rule, each naming its source:
[LRO] Azure REST API Guidelines "Long-running operations", [ARM] ARM RPC "Asynchronous
operations", [AUTOREST] final-state-via, [SDK] Azure SDK "Service API versions"."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobwarden.models.actions import Accept, Collect, Escalate, Finish, ProviderRequest, Wait
from jobwarden.models.actions import RequestPurpose as P
from jobwarden.models.contracts.contract import RemoteStatus
from jobwarden.models.contracts.routes import choose_route, place_job_id
from jobwarden.models.conventions.strategies import (
    FinalSource,
    Monitor,
    Tracked,
    establish,
    final_result,
    read_monitor_answer,
    with_api_version,
)
from jobwarden.models.errors import InvalidCommandError
from jobwarden.models.intake.submission import check_provider_command
from jobwarden.models.provider.requests import create_request
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import after_create, after_poll
from tests.unit.factories import NOW, context, operation, reply

ARM = context("azure_arm")
LRO = context("azure_lro")
BASE = ARM.base_url
ORDER = {
    "subscription": "00000000-0000-0000-0000-000000000000",
    "resource_group": "test-rg",
    "namespace": "Azure.ResourceManager.OperationTemplates",
    "type": "orders",
    "name": "order1",
    "api_version": "2023-12-01-preview",
    "resource": {"location": "eastus", "properties": {"productId": "product1", "amount": 1}},
}
ORDER_URL = (
    f"{BASE}/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/test-rg"
    "/providers/Azure.ResourceManager.OperationTemplates/orders/order1"
    "?api-version=2023-12-01-preview"
)
AAO = f"{BASE}/subscriptions/s/providers/p/locations/eastus/operations/aao"
LOC = f"{BASE}/subscriptions/s/providers/p/locations/eastus/operations/loc"
V = "?api-version=2023-12-01-preview"


def _created(command: dict[str, Any], answer: Any, ctx: Any = ARM) -> Any:
    op = operation(S.create_pending, command=command, provider=ctx.contract.name, create_attempts=1)
    request = create_request(ctx, op)
    return op, after_create(op, ctx, request, answer, NOW, 0.5)


def _action(command: dict[str, Any], answer: Any, ctx: Any = ARM) -> Any:
    return _created(command, answer, ctx)[1].action


# --- the create: which header names the monitor ------------------------------------------


@pytest.mark.parametrize(
    ("code", "headers", "body", "monitor", "status_url"),
    [
        # [ARM] Azure-AsyncOperation names the status monitor; it gets the request's api-version.
        (201, {"azure-asyncoperation": AAO}, {"properties": {}}, "status_monitor", AAO + V),
        # [ARM]/[LRO] a monitor beside a Location: the monitor carries the status.
        (
            202,
            {"azure-asyncoperation": AAO, "location": LOC},
            None,
            "status_monitor",
            AAO + V,
        ),
        # [ARM] only a Location: polled until it stops answering 202.
        (202, {"location": LOC}, None, "location", LOC + V),
        # [ARM] a PUT without headers, still provisioning: the resource itself.
        (201, {}, {"properties": {"provisioningState": "Creating"}}, "resource", ORDER_URL),
        (202, {}, None, "resource", ORDER_URL),
    ],
)
def test_the_create_answer_names_what_is_polled(
    code: int, headers: dict[str, str], body: object, monitor: str, status_url: str
) -> None:
    action = _action(ORDER, reply(code, body, headers=headers))
    assert isinstance(action, Accept) and action.then is None
    assert (action.polling_mode, action.status_url) == (monitor, status_url)


def test_the_monitor_wins_over_location_so_a_failed_job_is_never_read_as_succeeded() -> None:
    # Item 6 of issue 18: Azure-AsyncOperation says Failed while Location would answer 200.
    command = {**ORDER, "action": "resource-action", "operation": "export", "parameters": {}}
    op, decided = _created(
        command, reply(202, headers={"azure-asyncoperation": AAO, "location": LOC})
    )
    accepted = decided.action
    assert isinstance(accepted, Accept) and accepted.final_url == LOC + V
    polling = op.with_changes(
        {
            "state": S.observing,
            "status_url": accepted.status_url,
            "polling_mode": accepted.polling_mode,
            "result_reference": accepted.final_url,
            "accepted_at": NOW,
            "status_requests_used": 1,
        }
    )
    request = ProviderRequest(purpose=P.status, method="GET", url=AAO + V)
    failed = reply(200, {"status": "Failed", "error": {"code": "Boom"}})
    after = after_poll(polling, ARM, request, failed, NOW + timedelta(seconds=5), 0.5)
    assert isinstance(after.action, Finish) and after.action.state is S.failed


@pytest.mark.parametrize(
    ("code", "body", "ends"),
    [
        # [ARM] a PUT answered 200 with Succeeded, or with no provisioningState: done, and
        # that answer is the result (item 4: never re-fetched).
        (200, {"id": "/x", "properties": {"provisioningState": "Succeeded"}}, "collect"),
        (200, {"id": "/x", "properties": {}}, "collect"),
        (200, {"id": "/x", "properties": {"provisioningState": "Failed"}}, "failed"),
    ],
)
def test_a_put_that_completes_in_its_first_answer_keeps_that_body(
    code: int, body: dict[str, Any], ends: str
) -> None:
    action = _action(ORDER, reply(code, body))
    assert isinstance(action, Accept)
    if ends == "collect":
        assert isinstance(action.then, Collect)
        assert action.then.expected["final"] == "body"
        assert action.then.expected["inline"] == body
    else:
        assert isinstance(action.then, Finish) and action.then.state is S.failed


def test_a_202_naming_nothing_to_poll_is_a_contract_violation() -> None:
    command = {**ORDER, "action": "resource-action", "operation": "export"}
    action = _action(command, reply(202))
    assert isinstance(action, Escalate) and action.reason.value == "contract_violation"


def test_a_monitor_on_a_foreign_origin_is_never_accepted() -> None:
    action = _action(
        ORDER, reply(201, {}, headers={"azure-asyncoperation": "https://evil.example/op"})
    )
    assert isinstance(action, Escalate) and "origin" in action.detail


# --- each poll answer ------------------------------------------------------------------


def _obs(code: int, body: object = None, **headers: str) -> Any:
    return reply(code, body, headers=headers).observation


@pytest.mark.parametrize(
    ("monitor", "code", "body", "headers", "state", "new_url"),
    [
        # [ARM] Location: 202 running, a new Location replaces the old; 200/201/204 done.
        (Monitor.location, 202, None, {"location": LOC + "2"}, "InProgress", LOC + "2" + V),
        (Monitor.location, 202, None, {}, "InProgress", None),
        (Monitor.location, 200, [{"content": "a"}], {}, "Succeeded", None),
        (Monitor.location, 201, {"x": 1}, {}, "Succeeded", None),
        (Monitor.location, 204, None, {}, "Succeeded", None),
        # [ARM] the resource: a 200 without provisioningState is done.
        (Monitor.resource, 200, {"properties": {}}, {}, "Succeeded", None),
        (
            Monitor.resource,
            200,
            {"properties": {"provisioningState": "Updating"}},
            {},
            "Updating",
            None,
        ),
        (Monitor.resource, 202, None, {}, "InProgress", None),
        # [LRO] a status monitor: the body's status; a new monitor header replaces the URL.
        (
            Monitor.status_monitor,
            200,
            {"status": "Running"},
            {"operation-location": AAO + "2"},
            None,
            AAO + "2" + V,
        ),
    ],
)
def test_a_poll_answer_is_read_through_its_monitor(
    monitor: Monitor,
    code: int,
    body: object,
    headers: dict[str, str],
    state: str | None,
    new_url: str | None,
) -> None:
    answer = read_monitor_answer(ARM.contract, monitor, LOC + V, _obs(code, body, **headers))
    assert (answer.state, answer.status_url) == (state, new_url)


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        # [ARM]: only Succeeded, Failed and Canceled are terminal; without case.
        ("Succeeded", RemoteStatus.succeeded),
        ("failed", RemoteStatus.failed),
        ("Canceled", RemoteStatus.cancelled),
        ("Accepted", RemoteStatus.pending),
        ("Provisioning", RemoteStatus.pending),
        ("SomethingNew", RemoteStatus.pending),
    ],
)
def test_every_state_but_the_three_terminal_ones_is_still_running(
    raw: str, status: RemoteStatus
) -> None:
    assert ARM.contract.states.classify(raw) is status


def test_a_bodiless_202_on_a_location_is_a_wait_not_a_transport_failure() -> None:
    op = operation(
        S.observing,
        command=ORDER,
        status_url=LOC + V,
        polling_mode="location",
        accepted_at=NOW,
        status_requests_used=1,
    )
    request = ProviderRequest(purpose=P.status, method="GET", url=LOC + V)
    after = after_poll(op, ARM, request, reply(202, headers={"retry-after": "3"}), NOW, 0.5)
    assert isinstance(after.action, Wait)
    assert (
        after.action.delay_seconds == 3
        and after.action.delay_source.value == "provider_retry_after"
    )
    assert after.changes["transport_failures_used"] == 0


# --- where the final result is read ([AUTOREST] final-state-via, azure-core) ---------------


def _final(
    method: str,
    via: str | None,
    monitor: Monitor | None,
    final: str | None,
    body: object,
    code: int = 200,
) -> Any:
    from jobwarden.models.contracts.contract import FinalStateVia

    tracked = Tracked(
        method=method,
        final_state_via=FinalStateVia(via) if via else None,
        monitor=monitor,
        request_url=ORDER_URL,
        final_url=final,
    )
    return final_result(ARM.contract, tracked, body, status_code=code)


@pytest.mark.parametrize(
    ("method", "via", "monitor", "final", "body", "source", "url"),
    [
        (
            "DELETE",
            None,
            Monitor.status_monitor,
            None,
            {"status": "Succeeded"},
            FinalSource.none,
            None,
        ),
        (
            "PUT",
            None,
            Monitor.status_monitor,
            None,
            {"status": "Succeeded"},
            FinalSource.url,
            ORDER_URL,
        ),
        (
            "POST",
            "location",
            Monitor.status_monitor,
            LOC,
            {"status": "Succeeded"},
            FinalSource.url,
            LOC,
        ),
        (
            "POST",
            "operation-location",
            Monitor.status_monitor,
            LOC,
            {"status": "Succeeded"},
            FinalSource.body,
            None,
        ),
        (
            "POST",
            None,
            Monitor.status_monitor,
            None,
            {"status": "Succeeded", "resourceLocation": LOC},
            FinalSource.url,
            LOC + V,
        ),
        ("POST", None, Monitor.location, None, {"content": "x"}, FinalSource.body, None),
        # [RFC9110-15.3.5] only a 204 ends a POST with no body (a 200 without one: issue 34).
        ("POST", None, Monitor.location, None, None, FinalSource.missing, None),
        ("PUT", "original-uri", Monitor.location, None, None, FinalSource.url, ORDER_URL),
        ("PATCH", None, Monitor.resource, None, {"properties": {}}, FinalSource.body, None),
    ],
)
def test_the_final_result_is_read_where_the_convention_says(
    method: str,
    via: str | None,
    monitor: Monitor,
    final: str | None,
    body: object,
    source: FinalSource,
    url: str | None,
) -> None:
    result = _final(method, via, monitor, final, body)
    assert (result.source, result.url) == (source, url)


def test_a_post_whose_location_answers_204_has_no_final_body() -> None:
    result = _final("POST", None, Monitor.location, None, None, code=204)
    assert (result.source, result.url) == (FinalSource.none, None)


# --- routes and placeholders ------------------------------------------------------------


def test_one_contract_drives_put_patch_delete_and_post_of_one_api() -> None:
    methods = {}
    for action in (None, "update", "delete", "resource-action"):
        command = {**ORDER, "operation": "export", "parameters": {"format": "csv"}}
        if action:
            command["action"] = action
        request = create_request(ARM, operation(command=command))
        methods[action] = (request.method, request.json_body)
    assert methods[None] == ("PUT", ORDER["resource"])
    assert methods["update"] == ("PATCH", ORDER["resource"])
    assert methods["delete"] == ("DELETE", None)
    assert methods["resource-action"] == ("POST", {"format": "csv"})


def test_a_placeholder_value_is_one_encoded_segment() -> None:
    command = {**ORDER, "name": "a/b?c#d"}
    request = create_request(ARM, operation(command=command))
    assert "/orders/a%2Fb%3Fc%23d?api-version=" in request.url


@pytest.mark.parametrize(
    ("command", "field"),
    [
        ({k: v for k, v in ORDER.items() if k != "subscription"}, "command.subscription"),
        ({**ORDER, "name": ""}, "command.name"),
        ({**ORDER, "name": {"x": 1}}, "command.name"),
        ({**ORDER, "action": "reboot"}, "command.action"),
    ],
)
def test_a_command_that_cannot_fill_its_route_is_refused_at_submission(
    command: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidCommandError) as caught:
        check_provider_command(command, ARM.contract)
    assert caught.value.field == field


def test_an_arm_resource_id_is_placed_segment_by_segment() -> None:
    rid = "/subscriptions/s/resourceGroups/g/providers/p/orders/o 1"
    assert place_job_id("/{job_id}/cancel", rid.replace(" ", "%")) == (
        "/subscriptions/s/resourceGroups/g/providers/p/orders/o%251/cancel"
    )
    assert place_job_id("/v1/{job_id}", "operations/abc") == "/v1/operations/abc"
    assert place_job_id("/v1/{job_id}", "a/../b") is None
    assert place_job_id("/v1/{job_id}", "a//b") is None


def test_a_polling_url_without_api_version_gets_the_requests() -> None:
    # [SDK]: add it when absent, never the latest, never a second one.
    assert with_api_version(LOC, ORDER_URL) == LOC + V
    assert with_api_version(LOC + "?api-version=1", ORDER_URL) == LOC + "?api-version=1"
    assert with_api_version(LOC + "?a=1", ORDER_URL) == LOC + "?a=1&api-version=2023-12-01-preview"


def test_the_lro_standard_route_reads_the_monitors_result_inline() -> None:
    command = {"collection": "users", "name": "madge", "action": "export", "format": "json"}
    route = choose_route(LRO.contract.create, command)
    assert route.method == "POST"
    request = create_request(LRO, operation(command=command))
    assert request.url.endswith("/users/madge:export?api-version=2022-12-01-preview&format=json")
    assert request.json_body is None
    established = establish(
        LRO.contract,
        route,
        request.url,
        _obs(
            202,
            {"id": "op3", "status": "InProgress"},
            **{"operation-location": LRO.base_url + "/op3"},
        ),
    )
    assert established is not None and established.monitor is Monitor.status_monitor
    assert established.status_url == LRO.base_url + "/op3?api-version=2022-12-01-preview"
