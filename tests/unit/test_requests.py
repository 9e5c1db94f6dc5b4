"""How each shipped contract carries our token and finds the remote job in a create answer.

Pure: the requests are built by the core and only sent by the edge."""

from __future__ import annotations

from jobwarden.models.actions import ProviderRequest
from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.provider.requests import StepContext, create_request, job_locator, resolve_url
from jobwarden.models.provider.signals import HttpObservation, RawResponse
from tests.unit.factories import SHIPPED, TOKEN, contract, operation


def _create(contract: ProviderContract) -> tuple[dict[str, str], object]:
    request: ProviderRequest = create_request(
        StepContext(contract=contract, base_url=contract.base_url), operation()
    )
    return dict(request.headers), request.json_body


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


def test_paths_with_colons_join_onto_the_base_url() -> None:
    assert resolve_url("http://127.0.0.1:8765", "/v1/operations/op1:cancel") == (
        "http://127.0.0.1:8765/v1/operations/op1:cancel"
    )
    assert resolve_url("http://127.0.0.1:8765/", "v1/x") == "http://127.0.0.1:8765/v1/x"
    assert resolve_url("http://a.test", "https://other.test/x") == "https://other.test/x"


def test_the_create_request_goes_to_the_contract_path_with_its_method() -> None:
    google = load_contract(SHIPPED / "google_aip151.toml")
    request = create_request(StepContext(contract=google, base_url="http://g.test"), operation())
    assert request.method == google.create.method
    assert request.url == "http://g.test/" + google.create.path.lstrip("/")


def test_google_sends_request_id_in_the_body_and_reads_the_operation_name() -> None:
    google = load_contract(SHIPPED / "google_aip151.toml")
    headers, body = _create(google)
    assert headers == {} and body == {"report": "monthly", "request_id": TOKEN}
    job, status_url = job_locator(google, _answer(200, {"name": "operations/abc", "done": False}))
    assert (job, status_url) == ("operations/abc", "/v1/operations/abc")


def test_azure_sends_repeatability_request_id_and_follows_operation_location() -> None:
    azure = contract("operation_location")  # a plain Operation-Location contract
    headers, body = _create(azure)
    assert headers == {"Repeatability-Request-ID": TOKEN} and body == {"report": "monthly"}
    url = "https://example.cognitiveservices.azure.com/operations/op-1?api-version=2024-01-01"
    job, status_url = job_locator(azure, _answer(202, None, **{"operation-location": url}))
    assert job == status_url == url


def test_azure_without_operation_location_names_no_status_url() -> None:
    azure = contract("operation_location")  # a plain Operation-Location contract
    assert job_locator(azure, _answer(202, {"id": "x"})) == (None, None)


def test_openai_sends_idempotency_key_and_reads_the_batch_id() -> None:
    openai = load_contract(SHIPPED / "openai_batch.toml")
    headers, _ = _create(openai)
    assert headers == {"Idempotency-Key": TOKEN}
    job, status_url = job_locator(openai, _answer(200, {"id": "batch_1", "status": "validating"}))
    assert (job, status_url) == ("batch_1", "/v1/batches/batch_1")
