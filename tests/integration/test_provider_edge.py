"""The HTTP edge against the real sandbox: observations, never exceptions; plugins; secrets."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobwarden.models.actions import ProviderRequest, RequestPurpose
from jobwarden.models.contract import AuthSpec, ProviderContract
from jobwarden.models.contract_loader import load_contract
from jobwarden.models.errors import GiveUpError
from jobwarden.models.plugins import OutboundRequest, load_plugin
from jobwarden.models.requests import resolve_url
from jobwarden.models.signals import TransportFailure
from jobwarden.sandbox.server import SandboxServer
from jobwarden.tasks.provider_edge import ProviderClient
from jobwarden.tasks.runtime import step_contexts


def _get(url: str) -> ProviderRequest:
    return ProviderRequest(purpose=RequestPurpose.status, method="GET", url=url)


SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"


class BearerFromPlugin:
    """A plugin that signs requests itself (here: a fixed bearer token)."""

    def prepare_request(self, request: OutboundRequest) -> OutboundRequest:
        return request.with_headers({"Authorization": "Bearer plugin-token"})


@pytest.fixture
def server() -> Iterator[SandboxServer]:
    with SandboxServer(token="plugin-token") as s:
        yield s


def _contract(url: str, **changes: Any) -> ProviderContract:
    base = load_contract(SHIPPED / "sandbox.toml")
    return dataclasses.replace(base, base_url=url, base_url_env=None, **changes)


def test_a_plugin_signs_requests_before_they_leave(server: SandboxServer) -> None:
    contract = _contract(server.url, auth=None)
    plain = ProviderClient()
    signed = ProviderClient(
        {contract.name: load_plugin("tests.integration.test_provider_edge:BearerFromPlugin")}
    )
    url = resolve_url(contract.base_url, "/v1/jobs/job_missing")
    try:
        assert plain.send(contract, _get(url), trace_id="a" * 32).observation.status_code == 401
        assert signed.send(contract, _get(url), trace_id="a" * 32).observation.status_code == 404
    finally:
        plain.close()
        signed.close()


def test_refused_connection_is_an_observation_not_an_exception() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    contract = _contract(f"http://127.0.0.1:{port}", auth=None)
    client = ProviderClient()
    try:
        raw = client.send(
            contract, _get(resolve_url(contract.base_url, "/v1/jobs/x")), trace_id="b" * 32
        )
    finally:
        client.close()
    assert raw.observation.status_code is None
    assert raw.observation.transport_failure is TransportFailure.connect_refused


def test_a_missing_credential_names_the_variable_and_never_a_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("JOBWARDEN_SANDBOX_TOKEN", raising=False)
    contract = _contract(
        "http://127.0.0.1:9", auth=AuthSpec(scheme="bearer", secret_env="JOBWARDEN_SANDBOX_TOKEN")
    )
    client = ProviderClient()
    with pytest.raises(GiveUpError, match="JOBWARDEN_SANDBOX_TOKEN"):
        client.send(contract, _get("http://127.0.0.1:9/"), trace_id="c" * 32)
    client.close()


def test_paths_with_colons_join_onto_a_base_url_with_a_path() -> None:
    contract = _contract("https://example.test/api", auth=None)
    assert resolve_url(contract.base_url, "/v1/operations/op1:cancel") == (
        "https://example.test/api/v1/operations/op1:cancel"
    )


def test_history_excerpts_redact_secret_looking_fields_and_bound_their_size() -> None:
    from jobwarden.models.excerpts import excerpt
    from jobwarden.models.signals import HttpObservation, RawResponse

    body = {
        "id": "job_1",
        "access_token": "s3cr3t-value",
        "nested": {"Authorization": "Bearer abc", "api_key": "k"},
        "blob": "x" * 5000,
    }
    raw = RawResponse(
        observation=HttpObservation(
            status_code=200,
            headers={"retry-after": "3", "authorization": "Bearer abc"},
            body=body,
            body_problem=None,
            transport_failure=None,
        ),
        content=b"",
        content_type="application/json",
        provider_request_id=None,
    )
    ex = excerpt(raw)
    text = repr(ex)
    assert "s3cr3t-value" not in text and "Bearer abc" not in text and "'k'" not in text
    assert ex["body"]["id"] == "job_1"
    assert ex["headers"] == {"retry-after": "3"}
    assert len(ex["body"]["blob"]) <= 301


class Unwrap:
    """A plugin for a provider that wraps every status in an envelope."""

    def extract_status(self, body: object) -> object:
        assert isinstance(body, dict)
        return body["data"]


def test_a_plugin_reshapes_status_bodies_only() -> None:
    contract = _contract("http://127.0.0.1:9", auth=None)
    plugin = load_plugin("tests.integration.test_provider_edge:Unwrap")
    reshaped = step_contexts({contract.name: contract}, {contract.name: plugin}, {})
    assert reshaped[contract.name].status_body({"data": {"status": "running"}}) == {
        "status": "running"
    }
    plain = step_contexts({contract.name: contract}, {}, {})
    assert plain[contract.name].status_body({"data": 1}) == {"data": 1}
