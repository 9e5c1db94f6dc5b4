"""Outcomes read as the public conventions report them: AIP-151 error codes (google.rpc.Code
1 CANCELLED, 4 DEADLINE_EXCEEDED), Azure's OperationTimedOut, and a finer state beside done."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobwarden.models.contracts.contract import RemoteStatus
from jobwarden.models.provider.signals import read_status
from tests.unit.factories import NOW, contract

GOOGLE = contract("google_aip151")
AZURE = contract("operation_location")
DEADLINE = NOW.replace(year=NOW.year + 1)


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (1, RemoteStatus.cancelled),  # CANCELLED
        (4, RemoteStatus.expired),  # DEADLINE_EXCEEDED
        (13, RemoteStatus.failed),  # INTERNAL: a plain failure
    ],
)
def test_aip_151_error_codes_say_what_a_done_operation_with_an_error_really_is(
    code: int, outcome: RemoteStatus
) -> None:
    body = {"name": "operations/x", "done": True, "error": {"code": code, "message": "m"}}
    assert read_status(GOOGLE, body, now=NOW, deadline=DEADLINE).remote_status is outcome


def test_azure_reports_expiry_as_failed_with_operation_timed_out() -> None:
    body = {"status": "Failed", "error": {"code": "OperationTimedOut", "message": "m"}}
    assert read_status(AZURE, body, now=NOW, deadline=DEADLINE).remote_status is (
        RemoteStatus.expired
    )
    other = {"status": "Failed", "error": {"code": "InternalServerError"}}
    assert read_status(AZURE, other, now=NOW, deadline=DEADLINE).remote_status is (
        RemoteStatus.failed
    )


def _with_detail() -> object:
    status = replace(GOOGLE.status, detail_state_pointer="/metadata/state")
    states = replace(
        GOOGLE.states,
        detail={"RUNNING": RemoteStatus.pending, "SUCCEEDED": RemoteStatus.succeeded},
    )
    return replace(GOOGLE, status=status, states=states)


def test_an_undocumented_finer_state_is_unknown_even_when_done() -> None:
    c = _with_detail()
    body = {"done": True, "response": {"ok": 1}, "metadata": {"state": "REWINDING"}}
    reading = read_status(c, body, now=NOW, deadline=DEADLINE)  # type: ignore[arg-type]
    assert reading.remote_status is RemoteStatus.unknown
    assert "REWINDING" in (reading.raw_state or "")


def test_a_documented_finer_state_leaves_the_outcome_to_done() -> None:
    c = _with_detail()
    body = {"done": True, "response": {"ok": 1}, "metadata": {"state": "SUCCEEDED"}}
    reading = read_status(c, body, now=NOW, deadline=DEADLINE)  # type: ignore[arg-type]
    assert reading.remote_status is RemoteStatus.succeeded and reading.contradiction is None
