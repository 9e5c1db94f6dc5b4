"""What a finished Azure operation's success must carry, and where its final result is.

A success is recorded only with the evidence its convention requires; an answer
without it stops the operation (``succeeded_without_evidence``), never ends it as
succeeded. The rules, each beside its source:

- [ARM] ARM RPC, "Asynchronous operations": a PUT/PATCH ends with the resource itself
  (a JSON object) — azure-mgmt-core's BodyContentPolling raises "The response from long
  running operation does not contain a body" for a 200/201 without one. A DELETE's end
  may carry a body (its last answer's) or none. A 202 is never an end.
- [LRO] Azure REST API Guidelines, "Long-running operations": a POST action's result is
  JSON, read from the monitor, its ``resourceLocation`` or the Location.
- [RFC9110-15.3.5] a 204 "No Content" ends with no body, by definition: the one answer
  where "no result" is a result, beside a DELETE whose monitor ends without one.
- [AUTOREST] ``final-state-via``, as azure-core's ``get_final_get_url`` reads it.

Pure: no I/O, no clock. Every URL returned still passes the origin rule in the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from jobwarden.models.contracts.contract import FinalStateVia, ProviderContract
from jobwarden.models.conventions.urls import resolve_reference, with_api_version
from jobwarden.models.provider.pointers import resolve_pointer

__all__ = [
    "EVIDENCE_RULES",
    "MISSING_EVIDENCE",
    "Evidence",
    "FinalResult",
    "FinalSource",
    "Tracked",
    "final_result",
    "required_evidence",
]

RESOURCE_LOCATION: Final = "/resourceLocation"  # [LRO] "target resource location"
MISSING_EVIDENCE: Final = "succeeded_without_evidence"  # the machine-readable reason


class Evidence(StrEnum):
    """What a final answer's body must be for its success to be recorded."""

    resource = "resource"  # [ARM] a JSON object: the resource itself (PUT, PATCH)
    json = "json"  # [LRO] any JSON value: an action's result (POST)
    optional = "optional"  # [ARM] any JSON value, or no body at all (DELETE)
    nothing = "nothing"  # [RFC9110-15.3.5] a 204: no body, and none is needed


# The table the docs render (docs/contracts.md, "Convention reference"; a test keeps it equal).
EVIDENCE_RULES: Final = {
    "PUT": Evidence.resource,
    "PATCH": Evidence.resource,
    "POST": Evidence.json,
    "DELETE": Evidence.optional,
}


def required_evidence(method: str, status_code: int | None) -> Evidence:
    """The evidence a final answer of ``status_code`` to a ``method`` operation must carry."""
    if status_code == 204:
        return Evidence.nothing
    return EVIDENCE_RULES.get(method, Evidence.json)


class FinalSource(StrEnum):
    url = "url"  # GET this URL for the final result
    body = "body"  # the answer's body (or the contract's inline pointer into it) is the result
    none = "none"  # the operation has no final body
    missing = "missing"  # the answer lacks the evidence its success needs: stop, never succeed


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalResult:
    source: FinalSource
    url: str | None
    rule: str  # which rule chose it, for the history (the reason, for ``missing``)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tracked:
    """What an operation under an Azure convention keeps from its create: its route's
    method and final-state-via, the monitor, the create request's URL and the Location
    that names the final result (``operations.result_reference`` until collection)."""

    method: str
    final_state_via: FinalStateVia | None
    monitor: str | None  # a conventions.Monitor value
    request_url: str
    final_url: str | None


def _shape(body: object, readable: bool) -> str:
    if not readable:
        return "not JSON"
    if body is None:
        return "no body"
    return "a JSON object" if isinstance(body, dict) else "JSON that is not an object"


def _answer_body(method: str, body: object, status_code: int | None, readable: bool) -> FinalResult:
    """The final answer itself is the result: judged against the evidence it needs."""
    needed = required_evidence(method, status_code)
    shape = _shape(body, readable)
    if needed is Evidence.nothing or (needed is Evidence.optional and shape == "no body"):
        rule = "a 204 has no body" if needed is Evidence.nothing else "a DELETE ended without one"
        return FinalResult(source=FinalSource.none, url=None, rule=rule)
    wrong_shape = needed is Evidence.resource and shape != "a JSON object"
    if shape in ("no body", "not JSON") or wrong_shape:
        why = (
            f"{MISSING_EVIDENCE}: a {method}'s final http_{status_code} has {shape}; "
            f"its success needs {needed.value} evidence"
        )
        return FinalResult(source=FinalSource.missing, url=None, rule=why)
    return FinalResult(source=FinalSource.body, url=None, rule="the final answer's body")


def final_result(
    contract: ProviderContract,
    tracked: Tracked,
    body: object,
    *,
    status_code: int | None = 200,
    readable: bool = True,
) -> FinalResult:
    """Where a succeeded Azure operation's final result is read (azure-core's
    ``get_final_get_url``, then the generated client's deserialisation), or why the answer
    that said it succeeded (``body``, ``status_code``; ``readable`` False when its bytes
    were not JSON) is no evidence of success."""
    method, via, monitor = tracked.method, tracked.final_state_via, tracked.monitor
    request_url, final_url = tracked.request_url, tracked.final_url
    if monitor == "status_monitor":
        if method == "DELETE":
            # [ARM] the monitor's body is the operation's status, not a result.
            return FinalResult(source=FinalSource.none, url=None, rule="a DELETE's monitor ended")
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
        target = resolve_pointer(body, pointer)
        if isinstance(target, str) and target:
            # [RFC3986-5] a relative resourceLocation is relative to the final-state-via's
            # usual target; the create URL is the request the operation began with.
            url = with_api_version(resolve_reference(target, request_url), request_url)
            return FinalResult(
                source=FinalSource.url, url=url, rule="the monitor names the resourceLocation"
            )
        if method in ("PUT", "PATCH"):
            # azure-core reads a PUT/PATCH at its original URI whatever final-state-via
            # says here; "original-uri" on a POST changes nothing (its Location wins).
            return FinalResult(source=FinalSource.url, url=request_url, rule="the original URI")
        if final_url:
            return FinalResult(source=FinalSource.url, url=final_url, rule="a POST's Location")
        return FinalResult(source=FinalSource.body, url=None, rule="the monitor's body")
    if method in ("PUT", "PATCH") and monitor is not None and via is FinalStateVia.original_uri:
        rule = "final-state-via original-uri"
        return FinalResult(source=FinalSource.url, url=request_url, rule=rule)
    if method in ("PUT", "PATCH") and status_code == 204:
        # A 204 carries no resource: it is read where it lives, at the original URI.
        rule = "a 204 carries no resource: the original URI"
        return FinalResult(source=FinalSource.url, url=request_url, rule=rule)
    return _answer_body(method, body, status_code, readable)
