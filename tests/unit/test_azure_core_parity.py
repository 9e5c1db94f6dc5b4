"""The Azure conventions read an answer as azure-core's and azure-mgmt-core's own pollers
do (``BodyContentPolling``, ``LocationPolling``, ``AzureAsyncOperationPolling``), pinned
against those libraries' objects fed the same answers (STYLE: "a parity test against the
library's own objects"). Where jobwarden departs on purpose, the test says so:

- a resource poll answered 202 is still running here; BodyContentPolling would raise on
  a bodiless one ([ARM] RPC: 202 Accepted is never an end);
- a DELETE's monitor naming ``resourceLocation`` is not followed here (it names the
  resource just deleted); azure-core would GET it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("azure.mgmt.core")

from azure.core.pipeline import PipelineContext, PipelineResponse
from azure.core.pipeline.transport import HttpRequest, HttpResponse
from azure.core.polling.base_polling import BadResponse, LocationPolling
from azure.mgmt.core.polling.arm_polling import (
    AzureAsyncOperationPolling,
    BodyContentPolling,
)

from jobwarden.models.contracts.contract import FinalStateVia
from jobwarden.models.conventions.evidence import FinalSource, Tracked, final_result
from jobwarden.models.conventions.strategies import Monitor, read_monitor_answer
from tests.unit.factories import context, reply

ARM = context("azure_arm")
BASE = ARM.base_url
CREATE = f"{BASE}/subscriptions/s/resourceGroups/g/providers/p/widgets/w?api-version=1"
LOC = f"{BASE}/operations/loc?api-version=1"


class _Answer(HttpResponse):  # azure-core's legacy response base
    """An answer as azure-core's pollers read it: status, headers and bytes, no network."""

    def __init__(self, request: Any, code: int, body: object, headers: dict[str, str]) -> None:
        super().__init__(request, None)
        self.status_code = code
        self.headers = headers
        self.content_type = "application/json"
        self._bytes = b"" if body is None else json.dumps(body).encode()

    def body(self) -> bytes:
        return self._bytes


def _piped(method: str, code: int, body: object, **headers: str) -> Any:
    request = HttpRequest(method, CREATE)
    return PipelineResponse(request, _Answer(request, code, body, headers), PipelineContext(None))


BODIES: list[object] = [
    None,
    {"properties": {}},
    {"properties": {"provisioningState": "Succeeded"}},
    {"properties": {"provisioningState": "Updating"}},
    {"properties": {"provisioningState": "Failed"}},
]


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("code", [200, 201])
def test_a_resource_poll_reads_as_body_content_polling_does(code: int, body: object) -> None:
    polling: Any = BodyContentPolling()
    ours = read_monitor_answer(
        ARM.contract, Monitor.resource, CREATE, reply(code, body).observation
    )
    try:
        theirs: str | None = polling.get_status(_piped("PUT", code, body))
    except BadResponse:
        theirs = None  # "The response from long running operation does not contain a body."
    if theirs is None:
        assert ours.missing is not None
    else:
        assert (ours.missing, ours.state) == (None, theirs)


@pytest.mark.parametrize("code", [200, 201, 202, 204])
def test_a_location_poll_reads_as_location_polling_does(code: int) -> None:
    theirs = LocationPolling().get_status(_piped("POST", code, {"x": 1}))
    answer = reply(code, {"x": 1}).observation
    ours = read_monitor_answer(ARM.contract, Monitor.location, LOC, answer)
    assert ours.state == theirs


@pytest.mark.parametrize("method", ["PUT", "PATCH", "POST"])
@pytest.mark.parametrize("via", [None, "location", "azure-async-operation", "original-uri"])
@pytest.mark.parametrize("named", [False, True])
def test_a_status_monitors_final_result_is_read_where_azure_core_reads_it(
    method: str, via: str | None, named: bool
) -> None:
    options = {"final-state-via": via} if via else {}
    polling: Any = AzureAsyncOperationPolling(lro_options=options)
    initial = _piped(method, 202, None, **{"azure-asyncoperation": LOC, "location": LOC + "&l"})
    polling.set_initial_status(initial)
    done: dict[str, Any] = {"status": "Succeeded"}
    if named:
        done["resourceLocation"] = f"{BASE}/target?api-version=1"
    theirs = polling.get_final_get_url(_piped("GET", 200, done))
    tracked = Tracked(
        method=method,
        final_state_via=FinalStateVia(via) if via else None,
        monitor=Monitor.status_monitor.value,
        request_url=CREATE,
        final_url=LOC + "&l",
    )
    ours = final_result(ARM.contract, tracked, done)
    if theirs is None:
        assert ours.source is FinalSource.body, ours
    else:
        assert (ours.source, ours.url) == (FinalSource.url, theirs), ours
