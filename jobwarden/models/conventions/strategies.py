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
  Canceled are terminal; a 200 whose JSON object has no provisioningState is done, a
  200 with no body is no evidence: ``models/conventions/evidence.py``).
- [RFC3986-5] RFC 3986 section 5: a relative URL in a header resolves against the URL
  of the request whose answer carried it (``models/conventions/urls.py``).
- [AUTOREST] ``x-ms-long-running-operation-options.final-state-via``: where the final
  result is read.
- [SDK] Azure SDK general guidelines, "Service API versions" (and azure-sdk-for-net
  #25411): a polling URL without ``api-version`` gets the request's, never the latest.

Nothing here does I/O or reads the clock; the core's decisions consume what it reads.
Every URL it will follow (``followed``) passes the origin check in the caller before any
request; a URL header it does not follow is returned as ``ignored``, never checked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final

from jobwarden.models.contracts.contract import (
    Convention,
    FinalStateVia,
    ProviderContract,
    RemoteStatus,
)
from jobwarden.models.contracts.routes import ChosenRoute
from jobwarden.models.conventions.evidence import (
    FinalResult,
    FinalSource,
    Tracked,
    final_result,
)
from jobwarden.models.conventions.urls import (
    MAX_HEADER,
    Named,
    ignored_headers,
    resolve_reference,
    with_api_version,
)
from jobwarden.models.provider.pointers import resolve_pointer
from jobwarden.models.provider.signals import HttpObservation

__all__ = [
    "AZURE",
    "Established",
    "FinalResult",
    "FinalSource",
    "Monitor",
    "MonitorAnswer",
    "Tracked",
    "establish",
    "final_result",
    "location_followed",
    "monitor_headers",
    "read_monitor_answer",
    "with_api_version",
]

AZURE: Final = frozenset({Convention.azure_lro, Convention.azure_arm})

MONITOR_STATE: Final = "/status"  # [LRO] / [ARM] status monitor body
RESOURCE_STATE: Final = "/properties/provisioningState"  # [ARM] resource body


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


def monitor_headers(convention: Convention) -> tuple[str, ...]:
    """The status-monitor headers in the order they win; ``Location`` comes after them.

    [LRO] Operation-Location names the monitor; services that once sent Azure-AsyncOperation
    send both with one value. [ARM] Azure-AsyncOperation first (azure-mgmt-core's order).
    """
    if convention is Convention.azure_arm:
        return ("azure-asyncoperation", "operation-location")
    return ("operation-location", "azure-asyncoperation")


_ALL_HEADERS: Final = ("azure-asyncoperation", "operation-location", "location")


def _named(header: str, received: str, request_url: str) -> Named:
    """[RFC3986-5] the value resolved against the URL of the request that returned it."""
    if len(received) > MAX_HEADER:
        return Named(header=header, received=received, url=received)
    url = with_api_version(resolve_reference(received, request_url), request_url)
    return Named(header=header, received=received, url=url)


def location_followed(method: str, via: FinalStateVia | None) -> bool:
    """Whether a ``Location`` beside a status monitor may be requested for the final result.

    [AUTOREST] final-state-via and azure-core's ``get_final_get_url``: a DELETE's end is
    the monitor's; a PUT/PATCH reads its resource at the original URI unless
    final-state-via says location; a POST reads its Location unless final-state-via names
    the monitor. A Location never followed is ignored, never origin-checked.
    """
    if method == "DELETE":
        return False
    if method in ("PUT", "PATCH"):
        return via is FinalStateVia.location
    return via not in (FinalStateVia.azure_async_operation, FinalStateVia.operation_location)


@dataclass(frozen=True, slots=True, kw_only=True)
class Established:
    """What a create answer established: the monitor to poll, and where the result lives.

    ``monitor`` None means the answer itself was the end (azure-core's StatusCheckPolling):
    ``state`` then says how it ended and ``body`` holds the final body, if any.
    ``followed`` are the URLs that will be requested (each must pass the origin rule);
    ``ignored`` the URL headers the convention does not follow, values bounded.
    """

    monitor: Monitor | None
    status_url: str | None
    final_url: str | None  # a Location to read the result from once the monitor says so
    state: str | None  # the raw state the answer carries, when it carries one
    job_id: str | None  # the remote job's identity: the resource id, else the monitor URL
    followed: tuple[Named, ...] = ()
    ignored: Mapping[str, str] = field(default_factory=dict)


def _resource_id(body: object) -> str | None:
    found = resolve_pointer(body, "/id")
    return found if isinstance(found, str) and found else None


def _state(body: object, pointer: str) -> str | None:
    found = resolve_pointer(body, pointer)
    return found if isinstance(found, str) and found else None


def _terminal(contract: ProviderContract, state: str | None) -> bool:
    return state is not None and contract.states.classify(state) not in (
        RemoteStatus.pending,
        RemoteStatus.unknown,
    )


def _ended(state: str, body: object, headers: Mapping[str, str], job_id: str | None) -> Established:
    """An answer that is its own end: no monitor is followed, every URL header is noise."""
    return Established(
        monitor=None,
        status_url=None,
        final_url=None,
        state=state,
        job_id=job_id if job_id is not None else _resource_id(body),
        ignored=ignored_headers(headers, _ALL_HEADERS),
    )


def establish(
    contract: ProviderContract, route: ChosenRoute, request_url: str, answer: HttpObservation
) -> Established | None:
    """Read a 2xx create answer under an Azure convention; None when nothing can be polled.

    An answer that carries a terminal state inline ends the operation, whatever monitor
    it also names ([ARM]: a PUT/PATCH 200/201 with a terminal provisioningState).
    Otherwise the precedence of azure-core's chain: a status monitor header ([LRO]/[ARM]);
    else ``Location`` ([ARM]); else, for PUT/PATCH under ARM, the resource itself; else, for
    a 200/201/204, the answer is the end. A 202 with none of these names nothing to poll.
    Relative URLs resolve against ``request_url`` ([RFC3986-5]).
    """
    convention, method, headers, body = (
        contract.convention,
        route.method,
        answer.headers,
        answer.body,
    )
    status_code = answer.status_code
    state_pointer = contract.status.state_pointer
    arm_resource = convention is Convention.azure_arm and method in ("PUT", "PATCH")
    if arm_resource and status_code in (200, 201):
        inline = _state(body, state_pointer or RESOURCE_STATE)
        if _terminal(contract, inline) and inline is not None:
            return _ended(inline, body, headers, None)
    monitor_header = next((h for h in monitor_headers(convention) if _header(headers, h)), None)
    location = _header(headers, "location")
    if monitor_header is not None:
        monitor = _named(monitor_header, _header(headers, monitor_header) or "", request_url)
        state = _state(body, state_pointer or MONITOR_STATE)
        if _terminal(contract, state) and state is not None:
            # azure-core checks the initial body's status: a monitor already done is not
            # polled (azure-sdk-for-python #26380), so its URL is not followed either.
            # Its final result is still read as a status monitor's would be.
            ended = replace(
                _ended(state, body, headers, _resource_id(body)), monitor=Monitor.status_monitor
            )
            final = _named("location", location, request_url) if location else None
            if final is not None and location_followed(method, route.final_state_via):
                ignored = {k: v for k, v in ended.ignored.items() if k != "location"}
                return replace(ended, final_url=final.url, followed=(final,), ignored=ignored)
            return ended
        followed = [monitor]
        final_url = None
        skipped = tuple(h for h in _ALL_HEADERS if h != monitor_header)
        if location is not None and location_followed(method, route.final_state_via):
            final = _named("location", location, request_url)
            followed.append(final)
            final_url = final.url
            skipped = tuple(h for h in skipped if h != "location")
        return Established(
            monitor=Monitor.status_monitor,
            status_url=monitor.url,
            final_url=final_url,
            state=state,
            job_id=_resource_id(body) or _job_identity(monitor.url),
            followed=tuple(followed),
            ignored=ignored_headers(headers, skipped),
        )
    if location is not None:
        polled = _named("location", location, request_url)
        return Established(
            monitor=Monitor.location,
            status_url=polled.url,
            final_url=None,
            state=None,
            job_id=_resource_id(body) or _job_identity(polled.url),
            followed=(polled,),
        )
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
                job_id=_resource_id(body) or _job_identity(request_url),
            )
        return _ended(state, body, headers, None)
    if status_code == 202:
        return None
    state = _state(body, state_pointer or MONITOR_STATE) or "Succeeded"
    return _ended(state, body, headers, None)


def _job_identity(url: str) -> str:
    """A monitor URL as the remote job's identity, within the remote_job_id column (500):
    long ones ([ARM] LargeHeaders: 6 KiB of userContext) keep their path, else a digest."""
    if len(url) <= _MAX_IDENTITY:
        return url
    path = url.split("?", 1)[0]
    if len(path) <= _MAX_IDENTITY:
        return path
    return "sha256:" + hashlib.sha256(url.encode()).hexdigest()


_MAX_IDENTITY: Final = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorAnswer:
    """One status answer read through the operation's monitor.

    ``state`` is the raw state to classify (None: read the body through the contract);
    ``status_url`` / ``final_url`` are replacements the answer carries (resolved, with the
    api-version), each also in ``followed`` to be origin-checked by the caller;
    ``body_is_final`` says this answer's body is the final result when the state is a
    success ([ARM] Location, resource); ``missing`` why this answer cannot be a success
    (it lacks the evidence the convention requires), which stops the operation.
    """

    state: str | None
    state_pointer: str
    status_url: str | None
    final_url: str | None
    body_is_final: bool
    followed: tuple[Named, ...] = ()
    ignored: Mapping[str, str] = field(default_factory=dict)
    missing: str | None = None


def read_monitor_answer(
    contract: ProviderContract, monitor: Monitor, status_url: str, answer: HttpObservation
) -> MonitorAnswer:
    """What a 2xx status answer says under ``monitor``; the caller handles non-2xx answers.

    URLs the answer names resolve against ``status_url``, the request that returned them.
    """
    status_code, headers, body = answer.status_code, answer.headers, answer.body
    location = _header(headers, "location")
    if monitor is Monitor.location:
        # [ARM]: 202 is in progress (a new Location replaces the old); 200/201 done with
        # the final body; 204 done with none. No other header is followed here.
        state = "InProgress" if status_code == 202 else "Succeeded"
        running = state != "Succeeded"
        new = _named("location", location, status_url) if location and running else None
        replaced = new is not None and new.url != status_url
        return MonitorAnswer(
            state=state,
            state_pointer=MONITOR_STATE,
            status_url=new.url if new is not None and replaced else None,
            final_url=None,
            body_is_final=True,
            followed=(new,) if new is not None and replaced else (),
            ignored=ignored_headers(headers, _ALL_HEADERS if not replaced else _ALL_HEADERS[:2]),
        )
    if monitor is Monitor.resource:
        # [ARM] the resource's own answer (azure-mgmt-core BodyContentPolling): 202 is
        # still running; a 200/201 must carry the resource, a JSON object ("does not
        # contain a body" otherwise), whose provisioningState is the state, absent: done.
        pointer = contract.status.state_pointer or RESOURCE_STATE
        missing = None
        if status_code == 202:
            state = "InProgress"
        elif isinstance(body, dict) or status_code == 204:
            # A 204 has no body by definition: the resource is then read at its URI.
            state = _state(body, pointer) or "Succeeded"
        else:
            state = "Succeeded"
            missing = f"http_{status_code} from the resource without the resource body"
        return MonitorAnswer(
            state=state,
            state_pointer=pointer,
            status_url=None,
            final_url=None,
            body_is_final=True,
            ignored=ignored_headers(headers, _ALL_HEADERS),
            missing=missing,
        )
    # A status monitor: the state is the body's status. A new monitor header replaces the
    # status URL; a Location names (or moves) where the final result lives.
    monitor_header = next(
        (h for h in monitor_headers(contract.convention) if _header(headers, h)), None
    )
    new_monitor = (
        _named(monitor_header, _header(headers, monitor_header) or "", status_url)
        if monitor_header
        else None
    )
    if new_monitor is not None and new_monitor.url == status_url:
        new_monitor = None
    final = _named("location", location, status_url) if location else None
    return MonitorAnswer(
        state=None,
        state_pointer=contract.status.state_pointer or MONITOR_STATE,
        status_url=new_monitor.url if new_monitor is not None else None,
        final_url=final.url if final is not None else None,
        body_is_final=False,
        followed=tuple(n for n in (new_monitor, final) if n is not None),
    )
