"""How each shipped contract carries our token and finds the remote job in a create answer."""

from __future__ import annotations

from pathlib import Path

from jobwarden.models.contract_loader import load_contract
from jobwarden.models.signals import HttpObservation
from jobwarden.models.tables import OperationRow
from jobwarden.tasks.create_steps import _job_locator, create_request
from jobwarden.tasks.provider_edge import RawResponse

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"
TOKEN = "jw-0123456789abcdef"


def _row() -> OperationRow:
    return OperationRow(command={"report": "monthly"}, provider_token=TOKEN)


def _answer(status: int, body: object, **headers: str) -> RawResponse:
    return RawResponse(
        observation=HttpObservation(
            status_code=status,
            headers=headers,
            body=body,
            body_problem=None,
            transport_failure=None,
        ),
        content=b"",
        content_type="application/json",
        provider_request_id=None,
    )


def test_google_sends_request_id_in_the_body_and_reads_the_operation_name() -> None:
    google = load_contract(SHIPPED / "google_aip151.toml")
    headers, body = create_request(google, _row())
    assert headers == {} and body == {"report": "monthly", "request_id": TOKEN}
    job, status_url = _job_locator(google, _answer(200, {"name": "operations/abc", "done": False}))
    assert (job, status_url) == ("operations/abc", "/v1/operations/abc")


def test_azure_sends_repeatability_request_id_and_follows_operation_location() -> None:
    azure = load_contract(SHIPPED / "azure_lro.toml")
    headers, body = create_request(azure, _row())
    assert headers == {"Repeatability-Request-ID": TOKEN} and body == {"report": "monthly"}
    url = "https://example.cognitiveservices.azure.com/operations/op-1?api-version=2024-01-01"
    job, status_url = _job_locator(azure, _answer(202, None, **{"operation-location": url}))
    assert job == status_url == url


def test_azure_without_operation_location_names_no_status_url() -> None:
    azure = load_contract(SHIPPED / "azure_lro.toml")
    assert _job_locator(azure, _answer(202, {"id": "x"})) == (None, None)


def test_openai_sends_idempotency_key_and_reads_the_batch_id() -> None:
    openai = load_contract(SHIPPED / "openai_batch.toml")
    headers, _ = create_request(openai, _row())
    assert headers == {"Idempotency-Key": TOKEN}
    job, status_url = _job_locator(openai, _answer(200, {"id": "batch_1", "status": "validating"}))
    assert (job, status_url) == ("batch_1", "/v1/batches/batch_1")
