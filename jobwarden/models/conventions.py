"""Published long-running-operation conventions as pure polling strategies.

A contract names its ``convention``; the Azure ones are implemented here once, the way
azure-core composes its pollers (``azure/core/polling/base_polling.py``:
OperationResourcePolling, LocationPolling, StatusCheckPolling; azure-mgmt-core's
``arm_polling.py``: AzureAsyncOperationPolling, BodyContentPolling), and judged by
Microsoft's own TypeSpec scenario mocks (tests/spector). Each rule names its source:

- [LRO] Azure REST API Guidelines, "Long-running operations" (status monitor named by
  ``Operation-Location``; ``status`` NotStarted/Running/Succeeded/Failed/Canceled;
  a finished monitor names the target by ``resourceLocation``).
- [ARM] ARM RPC, "Asynchronous operations" (``Azure-AsyncOperation`` status monitor,
  ``Location`` polled until it stops answering 202; PUT/PATCH report
  ``properties.provisioningState`` on the resource itself; only Succeeded, Failed and
  Canceled are terminal; a 200 without a provisioningState is done).
- [AUTOREST] ``x-ms-long-running-operation-options.final-state-via``: where the final
  result is read.
- [SDK] Azure SDK general guidelines, "Service API versions" (and azure-sdk-for-net
  #25411): a polling URL without ``api-version`` gets the request's, never the latest.

Nothing here does I/O or reads the clock; the core's decisions consume what it reads.
Every URL it returns still passes the origin check in the caller before any request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from jobwarden.models.contract import (
    Convention,
    FinalStateVia,
    ProviderContract,
    RemoteStatus,
)
from jobwarden.models.pointers import MISSING, resolve_pointer
from jobwarden.models.routes import ChosenRoute
from jobwarden.models.signals import HttpObservation

__all__ = [
    "AZURE",
    "Established",
    "FinalResult",
    "Monitor",
    "MonitorAnswer",
    "Tracked",
    "establish",
    "final_result",
    "read_monitor_answer",
    "with_api_version",
]

AZURE: Final = frozenset({Convention.azure_lro, Convention.azure_arm})

MONITOR_STATE: Final = "/status"  # [LRO] / [ARM] status monitor body
RESOURCE_STATE: Final = "/properties/provisioningState"  # [ARM] resource body
RESOURCE_LOCATION: Final = "/resourceLocation"  # [LRO] "target resource location"


class Monitor(StrEnum):
    """What an accepted Azure operation is polled through (``operations.polling_mode``)."""

    # [LRO]/[ARM]: Operation-Location or Azure-AsyncOperation; the state is the body's status.
    status_monitor = "status_monitor"
    # [ARM] Location: 202 still running; 200/201 done with the final body; 204 done, none.
    location = "location"
    # [ARM] PUT/PATCH without a monitor: the resource itself, properties.provisioningState.
    resource = "resource"


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return value.strip() or None if isinstance(value, str) else None


def _monitor_headers(convention: Convention) -> tuple[str, ...]:
    # [LRO] Operation-Location names the monitor; services that once sent Azure-AsyncOperation
    # send both with one value. [ARM] Azure-AsyncOperation first (azure-mgmt-core's order).
    if convention is Convention.azure_arm:
        return ("azure-asyncoperation", "operation-location")
    return ("operation-location", "azure-asyncoperation")


def with_api_version(url: str, request_url: str) -> str:
    """[SDK] ``url`` with the request's ``api-version`` added when it carries none."""
    try:
        wanted = dict(parse_qsl(urlsplit(request_url).query)).get("api-version")
        parts = urlsplit(url)
    except ValueError:
        return url
    if not wanted or any(k.lower() == "api-version" for k, _ in parse_qsl(parts.query)):
        return url
    query = f"{parts.query}&" if parts.query else ""
    return urlunsplit(parts._replace(query=query + urlencode({"api-version": wanted})))


@dataclass(frozen=True, slots=True, kw_only=True)
class Established:
    """What a create answer established: the monitor to poll, and where the result lives.

    ``monitor`` None means the answer itself was the end (azure-core's StatusCheckPolling):
    ``state`` then says how it ended and ``body`` holds the final body, if any.
    """

    monitor: Monitor | None
    status_url: str | None
    final_url: str | None  # a Location to read the result from once the monitor says so
    state: str | None  # the raw state the answer carries, when it carries one
    job_id: str | None  # the remote job's identity: the resource id, else the monitor URL


def _resource_id(body: object) -> str | None:
    found = resolve_pointer(body, "/id")
    return found if isinstance(found, str) and found else None


def _state(body: object, pointer: str) -> str | None:
    found = resolve_pointer(body, pointer)
    return found if isinstance(found, str) and found else None


def establish(
    contract: ProviderContract, route: ChosenRoute, request_url: str, answer: HttpObservation
) -> Established | None:
    """Read a 2xx create answer under an Azure convention; None when nothing can be polled.

    Precedence, as azure-core's chain: a status monitor header ([LRO]/[ARM]); else
    ``Location`` ([ARM]); else, for PUT/PATCH under ARM, the resource itself; else, for a
    200/201/204, the answer is the end. A 202 with none of these names nothing to poll.
    """
    convention, method, headers, body = (
        contract.convention,
        route.method,
        answer.headers,
        answer.body,
    )
    status_code = answer.status_code
    monitor_url = next(
        (u for u in (_header(headers, h) for h in _monitor_headers(convention)) if u), None
    )
    location = _header(headers, "location")
    state_pointer = contract.status.state_pointer
    if monitor_url is not None:
        monitor_url = with_api_version(monitor_url, request_url)
        final = with_api_version(location, request_url) if location else None
        # azure-core checks the initial body's status: a monitor that is already done
        # need not be polled (azure-sdk-for-python #26380).
        return Established(
            monitor=Monitor.status_monitor,
            status_url=monitor_url,
            final_url=final,
            state=_state(body, state_pointer or MONITOR_STATE),
            job_id=_resource_id(body) or monitor_url,
        )
    if location is not None:
        location = with_api_version(location, request_url)
        return Established(
            monitor=Monitor.location,
            status_url=location,
            final_url=None,
            state=None,
            job_id=_resource_id(body) or location,
        )
    arm_resource = convention is Convention.azure_arm and method in ("PUT", "PATCH")
    if arm_resource:
        # [ARM] PUT/PATCH: 202 running; 201 its provisioningState, else running; 200 its
        # provisioningState, else done; 204 done (azure-mgmt-core BodyContentPolling).
        state = _state(body, state_pointer or RESOURCE_STATE)
        if status_code == 202 or (status_code == 201 and state is None):
            state = "InProgress"
        elif state is None:
            state = "Succeeded"
        if contract.states.classify(state) is RemoteStatus.pending:
            return Established(
                monitor=Monitor.resource,
                status_url=request_url,
                final_url=None,
                state=state,
                job_id=_resource_id(body) or request_url,
            )
        return Established(
            monitor=None, status_url=None, final_url=None, state=state, job_id=_resource_id(body)
        )
    if status_code == 202:
        return None
    state = _state(body, state_pointer or MONITOR_STATE) or "Succeeded"
    return Established(
        monitor=None, status_url=None, final_url=None, state=state, job_id=_resource_id(body)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorAnswer:
    """One status answer read through the operation's monitor.

    ``state`` is the raw state to classify (None: read the body through the contract);
    ``status_url`` / ``final_url`` are replacements the answer carries (already with the
    api-version), to be origin-checked by the caller; ``body_is_final`` says this answer's
    body is the final result when the state is a success ([ARM] Location, resource).
    """

    state: str | None
    state_pointer: str
    status_url: str | None
    final_url: str | None
    body_is_final: bool


def read_monitor_answer(
    contract: ProviderContract, monitor: Monitor, status_url: str, answer: HttpObservation
) -> MonitorAnswer:
    """What a 2xx status answer says under ``monitor``; the caller handles non-2xx answers."""
    status_code, headers, body = answer.status_code, answer.headers, answer.body
    location = _header(headers, "location")
    if monitor is Monitor.location:
        # [ARM]: 202 is in progress (a new Location replaces the old); 200/201 done with
        # the final body; 204 done with none.
        state = "InProgress" if status_code == 202 else "Succeeded"
        new = with_api_version(location, status_url) if location else None
        return MonitorAnswer(
            state=state,
            state_pointer=MONITOR_STATE,
            status_url=new if new != status_url else None,
            final_url=None,
            body_is_final=True,
        )
    if monitor is Monitor.resource:
        # [ARM] a 200 without provisioningState is done; a bodiless 202 is still running.
        pointer = contract.status.state_pointer or RESOURCE_STATE
        found = "InProgress" if status_code == 202 and body is None else None
        return MonitorAnswer(
            state=found or _state(body, pointer) or "Succeeded",
            state_pointer=pointer,
            status_url=None,
            final_url=None,
            body_is_final=True,
        )
    # A status monitor: the state is the body's status. A new monitor header replaces the
    # status URL; a Location names (or moves) where the final result lives.
    replaced = next(
        (u for u in (_header(headers, h) for h in _monitor_headers(contract.convention)) if u),
        None,
    )
    new_monitor = with_api_version(replaced, status_url) if replaced else None
    return MonitorAnswer(
        state=None,
        state_pointer=contract.status.state_pointer or MONITOR_STATE,
        status_url=new_monitor if new_monitor != status_url else None,
        final_url=with_api_version(location, status_url) if location else None,
        body_is_final=False,
    )


class FinalSource(StrEnum):
    url = "url"  # GET this URL for the final result
    body = "body"  # the answer's body (or the contract's inline pointer into it) is the result
    none = "none"  # the operation has no final body


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalResult:
    source: FinalSource
    url: str | None
    rule: str  # which rule chose it, for the history


@dataclass(frozen=True, slots=True, kw_only=True)
class Tracked:
    """What an operation under an Azure convention keeps from its create: its route's
    method and final-state-via, the monitor, the create request's URL and the Location
    that names the final result (``operations.result_reference`` until collection)."""

    method: str
    final_state_via: FinalStateVia | None
    monitor: Monitor | None
    request_url: str
    final_url: str | None


def final_result(contract: ProviderContract, tracked: Tracked, body: object) -> FinalResult:
    """Where a succeeded Azure operation's final result is read (azure-core's
    ``get_final_get_url``, then the generated client's deserialisation). ``body`` is the
    answer that said it succeeded (None when it had none)."""
    method, via, monitor = tracked.method, tracked.final_state_via, tracked.monitor
    request_url, final_url = tracked.request_url, tracked.final_url
    if method == "DELETE":
        return FinalResult(source=FinalSource.none, url=None, rule="a DELETE has no final body")
    if monitor is Monitor.status_monitor:
        if via is FinalStateVia.location and final_url:
            rule = "final-state-via location"
            return FinalResult(source=FinalSource.url, url=final_url, rule=rule)
        monitor_vias = (FinalStateVia.azure_async_operation, FinalStateVia.operation_location)
        if via in monitor_vias and method == "POST":
            return FinalResult(
                source=FinalSource.body, url=None, rule=f"final-state-via {via}: the monitor"
            )
        pointer = (
            contract.status.result_ref_pointer
            if contract.result is not None and contract.result.fetch == "url"
            else None
        ) or RESOURCE_LOCATION
        target = resolve_pointer(body, pointer) if pointer else MISSING
        if isinstance(target, str) and target:
            return FinalResult(
                source=FinalSource.url,
                url=with_api_version(target, request_url),
                rule="the monitor names the resourceLocation",
            )
        if method in ("PUT", "PATCH") or via is FinalStateVia.original_uri:
            return FinalResult(source=FinalSource.url, url=request_url, rule="the original URI")
        if final_url:
            return FinalResult(source=FinalSource.url, url=final_url, rule="a POST's Location")
        return FinalResult(source=FinalSource.body, url=None, rule="the monitor's body")
    if via is FinalStateVia.original_uri and method in ("PUT", "PATCH") and monitor is not None:
        rule = "final-state-via original-uri"
        return FinalResult(source=FinalSource.url, url=request_url, rule=rule)
    if body is None:
        return FinalResult(source=FinalSource.none, url=None, rule="done without a body")
    return FinalResult(source=FinalSource.body, url=None, rule="the final answer's body")
