"""The shipped contracts read real-shaped provider bodies the way each provider means them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobwarden.models.contract import ProviderContract, RemoteStatus
from jobwarden.models.contract_loader import load_contract
from jobwarden.models.signals import read_status

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"
NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
DEADLINE = NOW + timedelta(hours=2)


def contract(name: str) -> ProviderContract:
    return load_contract(SHIPPED / f"{name}.toml")


@pytest.mark.parametrize(
    ("body", "status", "ref"),
    [
        ({"status": "NotStarted"}, RemoteStatus.pending, None),
        ({"status": "Running", "percentComplete": 40}, RemoteStatus.pending, None),
        (
            {"status": "Succeeded", "resourceLocation": "https://x/r/1"},
            RemoteStatus.succeeded,
            "https://x/r/1",
        ),
        ({"status": "Failed", "error": {"code": "BadThing"}}, RemoteStatus.failed, None),
        ({"status": "Canceled"}, RemoteStatus.cancelled, None),
        ({"status": "Deleting"}, RemoteStatus.unknown, None),
    ],
)
def test_azure_operation_status_monitor(
    body: dict[str, object], status: RemoteStatus, ref: str | None
) -> None:
    reading = read_status(contract("azure_lro"), body, now=NOW, deadline=DEADLINE)
    assert (reading.remote_status, reading.result_ref) == (status, ref)


def test_azure_progress_is_read_from_percent_complete() -> None:
    reading = read_status(
        contract("azure_lro"),
        {"status": "Running", "percentComplete": 40},
        now=NOW,
        deadline=DEADLINE,
    )
    assert reading.progress == 40


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"name": "operations/1"}, RemoteStatus.pending),  # proto3 JSON omits done=false
        ({"name": "operations/1", "done": False}, RemoteStatus.pending),
        ({"name": "operations/1", "done": True, "response": {"rows": 3}}, RemoteStatus.succeeded),
        ({"name": "operations/1", "done": True, "error": {"code": 3}}, RemoteStatus.failed),
    ],
)
def test_google_aip_151_operations(body: dict[str, object], status: RemoteStatus) -> None:
    reading = read_status(contract("google_aip151"), body, now=NOW, deadline=DEADLINE)
    assert reading.remote_status is status
    assert reading.contradiction is None


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ("validating", RemoteStatus.pending),
        ("in_progress", RemoteStatus.pending),
        ("finalizing", RemoteStatus.pending),
        ("cancelling", RemoteStatus.pending),
        ("completed", RemoteStatus.succeeded),
        ("failed", RemoteStatus.failed),
        ("expired", RemoteStatus.expired),
        ("cancelled", RemoteStatus.cancelled),
    ],
)
def test_openai_batch_states(raw: str, status: RemoteStatus) -> None:
    body = {
        "id": "batch_1",
        "status": raw,
        "output_file_id": "file-1",
        "expires_at": int((NOW + timedelta(hours=24)).timestamp()),
    }
    assert (
        read_status(contract("openai_batch"), body, now=NOW, deadline=DEADLINE).remote_status
        is status
    )


def test_an_openai_batch_still_running_after_expires_at_is_a_contradiction() -> None:
    body = {
        "id": "batch_1",
        "status": "in_progress",
        "expires_at": int((NOW - timedelta(minutes=1)).timestamp()),
    }
    reading = read_status(contract("openai_batch"), body, now=NOW, deadline=DEADLINE)
    assert reading.contradiction == "running_after_expiry"


def test_an_openai_batch_completed_without_an_output_file_is_a_contradiction() -> None:
    body = {"id": "batch_1", "status": "completed", "output_file_id": None}
    reading = read_status(contract("openai_batch"), body, now=NOW, deadline=DEADLINE)
    assert reading.contradiction == "succeeded_without_result_reference"
