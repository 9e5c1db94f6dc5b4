"""HTTP classification, status reading through a contract, and JSON pointers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.contracts.contract import (
    CreateSpec,
    JobLocator,
    Limits,
    PollPolicy,
    ProviderContract,
    ReconciliationPath,
    ReconciliationSpec,
    RemoteStatus,
    ResultSpec,
    StateTable,
    StatusSpec,
    TokenPlacement,
)
from jobwarden.models.provider.pointers import MISSING, resolve_pointer
from jobwarden.models.provider.signals import (
    HttpObservation,
    SignalKind,
    TransportFailure,
    classify_http,
    read_status,
)

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
DEADLINE = NOW + timedelta(hours=1)

POLICY = PollPolicy(
    initial_delay_seconds=2.0,
    base_seconds=1.0,
    max_seconds=60.0,
    jitter_floor=0.5,
    hint_floor_seconds=1.0,
    hint_cap_seconds=120.0,
    rate_limit_base_seconds=30.0,
    max_rate_limited=3,
)


def make_contract(
    status: StatusSpec, states: StateTable, result: ResultSpec | None = None
) -> ProviderContract:
    """A minimal valid contract around the given status spec and state table."""
    return ProviderContract(
        name="test",
        source_file="test.toml",
        base_url="https://provider.test",
        create=CreateSpec(
            method="POST",
            path="/jobs",
            token_placement=TokenPlacement.header,
            token_name="Idempotency-Key",
            job_locator=JobLocator.body,
            job_id_pointer="/id",
        ),
        status=status,
        states=states,
        reconciliation=ReconciliationSpec(path=ReconciliationPath.same_token_retry),
        poll=POLICY,
        limits=Limits(
            create_deadline_seconds=60,
            result_deadline_seconds=3600,
            cancel_deadline_seconds=600,
            max_status_requests=50,
            max_transport_failures=5,
            request_timeout_seconds=10,
        ),
        result=result,
    )


# Azure-style LRO: a status string, progress, expiry and a result URL.
AZURE = make_contract(
    StatusSpec(
        method="GET",
        path=None,
        state_pointer="/status",
        progress_pointer="/percentComplete",
        poll_hint_pointer="/pollAfterSeconds",
        expiry_pointer="/expiresAt",
        result_ref_pointer="/resultUrl",
    ),
    StateTable(
        pending=frozenset({"NotStarted", "Running"}),
        succeeded=frozenset({"Succeeded"}),
        failed=frozenset({"Failed"}),
        cancelled=frozenset({"Canceled"}),
        expired=frozenset({"Expired"}),
        cancelling=frozenset({"Cancelling"}),
    ),
    ResultSpec(fetch="url"),
)

# Google AIP-151: `done` is a boolean; `error` set means failed, `response` is the result.
AIP151 = make_contract(
    StatusSpec(
        method="GET",
        path="/v1/operations/{job_id}",
        state_pointer="/done",
        error_pointer="/error",
        result_ref_pointer="/response",
    ),
    StateTable(pending=frozenset({"false"}), succeeded=frozenset({"true"}), failed=frozenset()),
    ResultSpec(fetch="inline"),
)


def observe(
    status_code: int | None,
    *,
    headers: Mapping[str, str] | None = None,
    body: object | None = None,
    body_problem: str | None = None,
    transport_failure: TransportFailure | None = None,
) -> HttpObservation:
    return HttpObservation(
        status_code=status_code,
        headers=headers or {},
        body=body,
        body_problem=body_problem,
        transport_failure=transport_failure,
    )


# --- classify_http -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status_code", "expected"),
    [
        (200, SignalKind.ok),
        (201, SignalKind.ok),
        (204, SignalKind.ok),
        (202, SignalKind.accepted),
        (400, SignalKind.client_error),
        (401, SignalKind.unauthorized),
        (403, SignalKind.forbidden),
        (404, SignalKind.not_found),
        (409, SignalKind.conflict),
        (410, SignalKind.gone),
        (422, SignalKind.conflict),
        (429, SignalKind.rate_limited),
        (500, SignalKind.server_error),
        (503, SignalKind.server_error),
        (599, SignalKind.server_error),
    ],
)
def test_each_status_code_maps_to_its_signal_kind(status_code: int, expected: SignalKind) -> None:
    signal = classify_http(observe(status_code, body={"x": 1}), now=NOW)
    assert signal.kind is expected
    assert signal.status_code == status_code
    assert signal.transport_failure is None


@pytest.mark.parametrize("failure", list(TransportFailure))
def test_a_transport_failure_is_a_transport_signal_whatever_the_status(
    failure: TransportFailure,
) -> None:
    signal = classify_http(observe(None, transport_failure=failure), now=NOW)
    assert signal.kind is SignalKind.transport
    assert signal.transport_failure is failure


@pytest.mark.parametrize("status_code", [100, 301, 304, 700])
def test_a_status_outside_2xx_4xx_5xx_is_a_protocol_failure(status_code: int) -> None:
    signal = classify_http(observe(status_code), now=NOW)
    assert signal.kind is SignalKind.transport
    assert signal.transport_failure is TransportFailure.protocol


@pytest.mark.parametrize(
    ("status_code", "body", "body_problem"),
    [
        (200, None, "malformed_json"),
        (202, None, "malformed_json"),
        (200, [1, 2], None),
        (200, "done", None),
        (200, 3, None),
    ],
)
def test_a_2xx_with_an_unparsable_or_non_object_body_is_malformed(
    status_code: int, body: object, body_problem: str | None
) -> None:
    signal = classify_http(observe(status_code, body=body, body_problem=body_problem), now=NOW)
    assert signal.kind is SignalKind.malformed


def test_an_empty_202_is_accepted_because_the_job_may_travel_in_headers() -> None:
    signal = classify_http(observe(202, headers={"location": "/ops/1"}), now=NOW)
    assert signal.kind is SignalKind.accepted
    assert signal.location == "/ops/1"


def test_a_malformed_error_body_does_not_hide_the_error_status() -> None:
    signal = classify_http(observe(503, body_problem="malformed_json"), now=NOW)
    assert signal.kind is SignalKind.server_error


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"operation-location": "https://p/ops/1", "location": "https://p/x"}, "https://p/ops/1"),
        ({"location": "https://p/x"}, "https://p/x"),
        ({"Operation-Location": "https://p/ops/2"}, "https://p/ops/2"),
        ({"location": ""}, None),
        ({}, None),
    ],
)
def test_location_prefers_operation_location(headers: dict[str, str], expected: str | None) -> None:
    assert classify_http(observe(202, headers=headers), now=NOW).location == expected


def test_retry_after_is_parsed_on_every_signal() -> None:
    signal = classify_http(observe(429, headers={"retry-after": "7"}), now=NOW)
    assert signal.retry_after.seconds == 7.0
    bad = classify_http(observe(503, headers={"retry-after": "later"}), now=NOW)
    assert bad.retry_after.seconds is None
    assert bad.retry_after.problem == "unparsable"


# --- read_status --------------------------------------------------------------------


def azure_body(**fields: Any) -> dict[str, Any]:
    return {"status": "Running", **fields}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("NotStarted", RemoteStatus.pending),
        ("Running", RemoteStatus.pending),
        ("Cancelling", RemoteStatus.pending),
        ("Succeeded", RemoteStatus.succeeded),
        ("Failed", RemoteStatus.failed),
        ("Canceled", RemoteStatus.cancelled),
        ("Expired", RemoteStatus.expired),
        ("Paused", RemoteStatus.unknown),
        ("running", RemoteStatus.unknown),  # the table is exact: no case folding
    ],
)
def test_the_state_table_classifies_raw_states(raw: str, expected: RemoteStatus) -> None:
    body = {"status": raw, "resultUrl": "https://p/r"}
    reading = read_status(AZURE, body, now=NOW, deadline=DEADLINE)
    assert reading.remote_status is expected
    assert reading.raw_state == raw


@pytest.mark.parametrize("body", [{}, {"status": None}, {"status": 3}, {"status": ["Running"]}, []])
def test_a_missing_or_non_string_state_is_unknown(body: object) -> None:
    reading = read_status(AZURE, body, now=NOW, deadline=DEADLINE)
    assert reading.remote_status is RemoteStatus.unknown
    assert reading.raw_state is None


@pytest.mark.parametrize(
    ("body", "expected", "raw_state"),
    [
        ({"done": False}, RemoteStatus.pending, "false"),
        ({"done": True, "response": {"rows": 3}}, RemoteStatus.succeeded, "true"),
        ({"done": True, "error": {"code": 13, "message": "boom"}}, RemoteStatus.failed, "true"),
        ({"done": True, "error": None, "response": {}}, RemoteStatus.succeeded, "true"),
        # An error means failed even if `done` disagrees.
        ({"done": False, "error": {"code": 9}}, RemoteStatus.failed, "false"),
        ({"done": "yes"}, RemoteStatus.unknown, "yes"),
    ],
)
def test_aip_151_done_and_error_classify_the_operation(
    body: dict[str, Any], expected: RemoteStatus, raw_state: str
) -> None:
    reading = read_status(AIP151, body, now=NOW, deadline=DEADLINE)
    assert reading.remote_status is expected
    assert reading.raw_state == raw_state
    assert reading.error == body.get("error")


def test_aip_151_done_with_a_response_needs_no_result_reference() -> None:
    body = {"done": True, "response": {"rows": 3}}
    reading = read_status(AIP151, body, now=NOW, deadline=DEADLINE)
    assert reading.remote_status is RemoteStatus.succeeded
    assert reading.contradiction is None


def test_aip_151_done_with_neither_response_nor_error_is_a_contradiction() -> None:
    # AIP-151: a done operation carries exactly one of `response` or `error`.
    reading = read_status(AIP151, {"done": True}, now=NOW, deadline=DEADLINE)
    assert reading.remote_status is RemoteStatus.succeeded
    assert reading.contradiction == "succeeded_without_result"


def test_succeeded_without_a_result_reference_is_a_contradiction() -> None:
    reading = read_status(AZURE, {"status": "Succeeded"}, now=NOW, deadline=DEADLINE)
    assert reading.remote_status is RemoteStatus.succeeded
    assert reading.contradiction == "succeeded_without_result_reference"


@pytest.mark.parametrize("ref", [None, "", 42, {"url": "https://p/r"}])
def test_only_a_non_empty_string_counts_as_a_result_reference(ref: object) -> None:
    body = {"status": "Succeeded", "resultUrl": ref}
    reading = read_status(AZURE, body, now=NOW, deadline=DEADLINE)
    assert reading.result_ref is None
    assert reading.contradiction == "succeeded_without_result_reference"


def test_succeeded_with_a_result_reference_is_consistent() -> None:
    body = {"status": "Succeeded", "resultUrl": "https://p/r/1"}
    reading = read_status(AZURE, body, now=NOW, deadline=DEADLINE)
    assert reading.result_ref == "https://p/r/1"
    assert reading.contradiction is None


def test_a_contract_without_a_result_reference_pointer_expects_none() -> None:
    contract = replace(AZURE, status=replace(AZURE.status, result_ref_pointer=None))
    reading = read_status(contract, {"status": "Succeeded"}, now=NOW, deadline=DEADLINE)
    assert reading.contradiction is None


def test_running_after_its_own_expiry_is_a_contradiction() -> None:
    body = azure_body(expiresAt="2024-05-01T11:59:59Z")
    reading = read_status(AZURE, body, now=NOW, deadline=DEADLINE)
    assert reading.remote_status is RemoteStatus.pending
    assert reading.contradiction == "running_after_expiry"


def test_running_before_its_expiry_is_consistent() -> None:
    body = azure_body(expiresAt="2024-05-01T14:00:00+02:00")  # 12:00 UTC, not yet past
    reading = read_status(AZURE, body, now=NOW, deadline=DEADLINE)
    assert reading.expires_at == NOW
    assert reading.contradiction is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-05-01T13:00:00Z", NOW + timedelta(hours=1)),
        ("2024-05-01t13:00:00.5z", NOW + timedelta(hours=1, milliseconds=500)),
        ("2024-05-01T13:00:00", None),  # no offset: not RFC 3339
        ("2024-05-01", None),
        ("20240501T130000Z", None),
        ("2024-13-01T13:00:00Z", None),
        ("tomorrow", None),
        (1714568400, datetime(2024, 5, 1, 13, 0, tzinfo=UTC)),
    ],
)
def test_expiry_must_be_an_rfc_3339_timestamp(value: object, expected: datetime | None) -> None:
    reading = read_status(AZURE, azure_body(expiresAt=value), now=NOW, deadline=DEADLINE)
    assert reading.expires_at == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0.0), (42.5, 42.5), (100, 100.0), (101, None), (-1, None), (True, None), ("50", None)],
)
def test_progress_is_a_number_between_0_and_100(value: object, expected: float | None) -> None:
    reading = read_status(AZURE, azure_body(percentComplete=value), now=NOW, deadline=DEADLINE)
    assert reading.progress == expected


def test_progress_100_is_not_success() -> None:
    reading = read_status(AZURE, azure_body(percentComplete=100), now=NOW, deadline=DEADLINE)
    assert reading.remote_status is RemoteStatus.pending


def test_the_poll_hint_is_read_and_validated_against_the_deadline() -> None:
    ok = read_status(AZURE, azure_body(pollAfterSeconds=15), now=NOW, deadline=DEADLINE)
    assert ok.poll_hint.seconds == 15.0
    late = read_status(AZURE, azure_body(pollAfterSeconds=7200), now=NOW, deadline=DEADLINE)
    assert late.poll_hint.problem == "beyond_deadline"
    absent = read_status(AZURE, azure_body(), now=NOW, deadline=DEADLINE)
    assert absent.poll_hint.seconds is None
    assert absent.poll_hint.problem is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(body=json_values)
def test_read_status_never_raises_on_any_json_body(body: object) -> None:
    for contract in (AZURE, AIP151):
        reading = read_status(contract, body, now=NOW, deadline=DEADLINE)
        assert reading.remote_status in RemoteStatus


# --- resolve_pointer ----------------------------------------------------------------

DOC = {"a": [{"b": 1}, None], "c/d": 2, "e~f": 3, "": 4, "n": None, "s": "text"}


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [
        ("", DOC),
        ("/a/0/b", 1),
        ("/a/1", None),
        ("/c~1d", 2),
        ("/e~0f", 3),
        ("/", 4),
        ("/n", None),
        ("/a/2", MISSING),
        ("/a/-", MISSING),
        ("/a/01", MISSING),
        ("/a/x", MISSING),
        ("/s/0", MISSING),
        ("/a/0/b/c", MISSING),
        ("/zzz", MISSING),
        ("a", MISSING),
    ],
)
def test_json_pointers_follow_rfc_6901(pointer: str, expected: object) -> None:
    assert resolve_pointer(DOC, pointer) == expected


def test_missing_is_distinct_from_json_null() -> None:
    assert resolve_pointer({"x": None}, "/x") is None
    assert resolve_pointer({}, "/x") is MISSING
    assert not MISSING


@given(doc=json_values, pointer=st.text(max_size=12))
def test_resolve_pointer_never_raises(doc: object, pointer: str) -> None:
    resolve_pointer(doc, pointer)


def test_expiry_as_unix_seconds_is_read_like_openai_sends_it() -> None:
    from jobwarden.models.provider.signals import parse_timestamp

    assert parse_timestamp(1_700_000_000) == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert parse_timestamp(True) is None
    assert parse_timestamp(-1) is None
    assert parse_timestamp(float("inf")) is None
