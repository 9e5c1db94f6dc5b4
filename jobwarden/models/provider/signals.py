"""What a provider's HTTP answer means, before any decision is taken.

The HTTP edge turns an httpx response (or exception) into an
``HttpObservation``; this module classifies it into an ``HttpSignal`` and
reads a status body through the provider contract into a ``StatusReading``.
Both are pure and never raise on provider input: odd answers become a signal
kind, an ``unknown`` status or a recorded ``contradiction``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from jobwarden.models.contracts.contract import ProviderContract, RemoteStatus
from jobwarden.models.polling.backoff import (
    PollHint,
    RetryAfter,
    parse_retry_after,
    validate_poll_hint,
)
from jobwarden.models.provider.pointers import MISSING, Missing, resolve_pointer
from jobwarden.models.results.validation import Collected


class TransportFailure(StrEnum):
    connect_refused = "connect_refused"  # nothing listened; the request was not sent
    connect_timeout = "connect_timeout"  # no connection within the timeout
    read_timeout = "read_timeout"  # sent, but no answer in time: the outcome is unknown
    dns = "dns"  # the provider's name did not resolve
    tls = "tls"  # the TLS handshake or certificate check failed
    connection_reset = "connection_reset"  # the peer dropped the connection mid-exchange
    protocol = "protocol"  # the answer was not valid HTTP, or an unexpected status class
    # The result store refused or went away while a download streamed into it: nothing was
    # stored, and the download is tried again under the same transport budget.
    result_store = "result_store"


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpObservation:
    """One HTTP exchange as the edge saw it; no httpx types cross this line."""

    status_code: int | None  # None when no response arrived
    headers: Mapping[str, str]  # keys lower-cased
    body: object | None  # parsed JSON, or None when empty or unparsable
    body_problem: str | None  # e.g. "malformed_json"
    transport_failure: TransportFailure | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RawResponse:
    """An answer as the edge read it: the observation plus the bounded bytes."""

    observation: HttpObservation
    content: bytes
    content_type: str | None
    provider_request_id: str | None
    # A result download streamed into the result store and judged on the way (its
    # ``content`` is then only what is kept inline); None for every other answer.
    collected: Collected | None = None


class SignalKind(StrEnum):
    ok = "ok"  # 2xx other than 202
    accepted = "accepted"  # 202
    not_found = "not_found"  # 404
    unauthorized = "unauthorized"  # 401
    forbidden = "forbidden"  # 403
    rate_limited = "rate_limited"  # 429
    conflict = "conflict"  # 409 or 422
    gone = "gone"  # 410: retention ended
    client_error = "client_error"  # any other 4xx
    server_error = "server_error"  # 5xx
    transport = "transport"  # no usable HTTP answer (see transport_failure)
    malformed = "malformed"  # 2xx whose body failed to parse or is not a JSON object


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpSignal:
    kind: SignalKind
    status_code: int | None
    retry_after: RetryAfter
    location: str | None  # Operation-Location, else Location
    transport_failure: TransportFailure | None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        # The edge promises lower-cased keys; tolerate a caller that forgot.
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value


def _kind_for_status(code: int) -> SignalKind | None:
    if 200 <= code < 300:
        return SignalKind.accepted if code == 202 else SignalKind.ok
    specific = {
        401: SignalKind.unauthorized,
        403: SignalKind.forbidden,
        404: SignalKind.not_found,
        410: SignalKind.gone,
        409: SignalKind.conflict,
        422: SignalKind.conflict,
        429: SignalKind.rate_limited,
    }
    if code in specific:
        return specific[code]
    if 400 <= code < 500:
        return SignalKind.client_error
    if 500 <= code < 600:
        return SignalKind.server_error
    return None


def classify_http(obs: HttpObservation, *, now: datetime, json_body: bool = True) -> HttpSignal:
    """Classify one exchange. Never raises.

    No response, or a status outside 2xx/4xx/5xx (httpx does not follow
    redirects, so a 3xx is as unusable as a broken answer), is ``transport``;
    the latter with ``transport_failure=protocol``. A 2xx with an unparsable
    or non-object body is ``malformed``; an empty 2xx body (None without a
    problem) is not, since a 202 may carry its job only in headers. With
    ``json_body=False`` (a result download: CSV, JSON Lines) the body is not judged.
    """
    retry_after = parse_retry_after(_header(obs.headers, "retry-after"), now)
    location = _header(obs.headers, "operation-location") or _header(obs.headers, "location")
    failure = obs.transport_failure
    kind: SignalKind | None = None
    if failure is None and obs.status_code is not None:
        kind = _kind_for_status(obs.status_code)
        if kind is None:
            failure = TransportFailure.protocol
    if kind is None:
        kind = SignalKind.transport
    elif (
        json_body
        and kind in (SignalKind.ok, SignalKind.accepted)
        and (
            obs.body_problem is not None
            or (obs.body is not None and not isinstance(obs.body, Mapping))
        )
    ):
        kind = SignalKind.malformed
    return HttpSignal(
        kind=kind,
        status_code=obs.status_code,
        retry_after=retry_after,
        location=location or None,
        transport_failure=failure if kind is SignalKind.transport else None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusReading:
    """A status body read through the contract. Never a decision by itself."""

    remote_status: RemoteStatus
    raw_state: str | None  # the provider's own word; None when absent or not a string/bool
    progress: float | None  # 0..100; informative only (progress 100 is not success)
    poll_hint: PollHint
    expires_at: datetime | None
    result_ref: str | None
    error: object | None  # the value at the contract's error pointer, if any
    contradiction: str | None  # "succeeded_without_result_reference" | "running_after_expiry"
    started_at: datetime | None = None  # when the remote job started, as the provider says
    eta: datetime | None = None  # when the provider expects the job to finish, on its clock
    # One item's share of the progress when it came from item counts (100 / total).
    progress_step: float | None = None


_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def _optional(body: object, pointer: str | None) -> object | Missing:
    return MISSING if pointer is None else resolve_pointer(body, pointer)


def _raw_state(value: object | Missing) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return None


def _progress(value: object | Missing) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and 0.0 <= number <= 100.0 else None


def _count(value: object | Missing) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if value >= 0 else None


def item_progress(completed: object, failed: object, total: object) -> float | None:
    """``100 * (completed + failed) / total`` from provider item counts, or None.

    OpenAI Batch's ``request_counts``: a failed request is processed as surely as a
    completed one, so both count towards the pace. Counts that are not non-negative
    integers, a total of 0 and counts beyond the total are no evidence (a provider that
    contradicts itself says nothing about its finish). ``failed`` may be MISSING.
    """
    done, total_n = _count(completed), _count(total)
    lost = 0 if isinstance(failed, Missing) or failed is None else _count(failed)
    if done is None or lost is None or not total_n or done + lost > total_n:
        return None
    return 100.0 * (done + lost) / total_n


# Unix-seconds expiries (OpenAI batches) beyond this are garbage, not times.
_MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z


def parse_timestamp(value: object | Missing) -> datetime | None:
    """An RFC 3339 string or, as OpenAI sends, Unix seconds; anything else is None."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(value) and 0 <= value <= _MAX_EPOCH:
            return datetime.fromtimestamp(value, tz=UTC)
        return None
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        return None
    try:
        return datetime.fromisoformat(value.upper())
    except ValueError:
        return None


def _refine(
    contract: ProviderContract, body: object, status: RemoteStatus, raw_state: str | None
) -> tuple[RemoteStatus, str | None]:
    """The outcome a failed job's error code really is, and the finer state's word.

    AIP-151 reports a cancelled or timed-out operation as done + error (code 1, 4);
    Azure reports expiry as Failed with error.code OperationTimedOut. A finer state the
    contract does not list (an undocumented metadata.state) is unknown, never guessed.
    """
    spec, states = contract.status, contract.states
    if status is RemoteStatus.failed and spec.error_code_pointer and states.error_codes:
        code = resolve_pointer(body, spec.error_code_pointer)
        if isinstance(code, str | int) and not isinstance(code, bool):
            status = states.error_codes.get(str(code), status)
    if spec.detail_state_pointer and states.detail:
        detail = _raw_state(resolve_pointer(body, spec.detail_state_pointer))
        if detail is not None:
            known = states.detail.get(detail)
            if known is None:
                return RemoteStatus.unknown, f"{raw_state}/{detail}"
            if status is RemoteStatus.unknown:
                status = known
    return status, raw_state


def read_status(  # noqa: PLR0913 - a convention's state (or its pointer) rides beside the body
    contract: ProviderContract,
    body: object,
    *,
    now: datetime,
    deadline: datetime,
    state: str | None = None,
    state_pointer: str | None = None,
) -> StatusReading:
    """Read a parsed status body through ``contract.status``. Never raises.

    A non-null value at ``error_pointer`` means failed whatever the state says
    (AIP-151: ``done: true`` with ``error``). A missing or non-string state is
    unknown. Contradictions keep the classified status and set
    ``contradiction``; the decision core escalates them.
    """
    spec = contract.status
    # A convention may say where the state sits (a monitor's /status, an ARM resource's
    # provisioningState) or what it is (from the HTTP status code) instead of the contract.
    pointer = state_pointer or spec.state_pointer or ""
    found: object = state if state is not None else resolve_pointer(body, pointer)
    if isinstance(found, Missing) and spec.state_default is not None:
        found = spec.state_default
    raw_state = _raw_state(found)
    error_value = _optional(body, spec.error_pointer)
    error = None if isinstance(error_value, Missing) else error_value
    if error is not None:
        remote_status = RemoteStatus.failed
    elif raw_state is None:
        remote_status = RemoteStatus.unknown
    else:
        remote_status = contract.states.classify(raw_state)
    remote_status, raw_state = _refine(contract, body, remote_status, raw_state)

    ref_value = _optional(body, spec.result_ref_pointer)
    result_ref = ref_value if isinstance(ref_value, str) and ref_value else None
    expires_at = parse_timestamp(_optional(body, spec.expiry_pointer))

    contradiction: str | None = None
    # AIP-151: `done` with neither `response` nor `error` is no outcome at all.
    inline_missing = (
        contract.result is not None
        and contract.result.fetch == "inline"
        and spec.result_ref_pointer is not None
        and resolve_pointer(body, spec.result_ref_pointer) in (MISSING, None)
    )
    # A reference is only expected where the contract says a finished job names one.
    expects_ref = (
        contract.result is not None
        and contract.result.fetch != "inline"
        and spec.result_ref_pointer is not None
    )
    if remote_status is RemoteStatus.succeeded and expects_ref and result_ref is None:
        contradiction = "succeeded_without_result_reference"
    elif remote_status is RemoteStatus.succeeded and inline_missing:
        contradiction = "succeeded_without_result"
    elif remote_status is RemoteStatus.pending and expires_at is not None and expires_at < now:
        contradiction = "running_after_expiry"

    progress = _progress(_optional(body, spec.progress_pointer))
    step = None
    if progress is None and spec.items_total_pointer is not None:
        total = _optional(body, spec.items_total_pointer)
        progress = item_progress(
            _optional(body, spec.items_completed_pointer),
            _optional(body, spec.items_failed_pointer),
            total,
        )
        step = None if progress is None else 100.0 / float(total)  # type: ignore[arg-type]
    return StatusReading(
        remote_status=remote_status,
        raw_state=raw_state,
        progress=progress,
        poll_hint=validate_poll_hint(
            _optional(body, spec.poll_hint_pointer), now=now, deadline=deadline
        ),
        expires_at=expires_at,
        result_ref=result_ref,
        error=error,
        contradiction=contradiction,
        started_at=parse_timestamp(_optional(body, spec.started_at_pointer)),
        eta=parse_timestamp(_optional(body, spec.eta_pointer)),
        progress_step=step,
    )
