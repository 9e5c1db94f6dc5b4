"""The HTTP edge against real servers: observations, never exceptions; plugins; secrets;
whole-request deadlines, bodies cut while reading, depth-bounded JSON."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jobwarden.demo.sandbox.server import SandboxServer
from jobwarden.models.actions import ProviderRequest, RequestPurpose
from jobwarden.models.contracts.contract import AuthSpec, ProviderContract
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.contracts.plugins import OutboundRequest, load_plugin
from jobwarden.models.errors import GiveUpError
from jobwarden.models.provider.requests import resolve_url
from jobwarden.models.provider.signals import RawResponse, TransportFailure
from jobwarden.tasks.provider.edge import (
    ProviderClient,
    auth_headers,
    json_depth,
    parse_json,
    secret_forms,
)
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
    from jobwarden.models.history.excerpts import excerpt
    from jobwarden.models.provider.signals import HttpObservation, RawResponse

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


# -- hostile answers: bounded time, bounded memory, observations not exceptions ---------

SECRET = "edge-secret-0123456789abcdef"


@pytest.fixture
def secured(monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxServer]:
    """A sandbox that wants SECRET, and the variable the contract reads it from."""
    monkeypatch.setenv("JOBWARDEN_EDGE_TEST_TOKEN", SECRET)
    with SandboxServer(token=SECRET) as s:
        yield s


def _secured_contract(url: str, *, timeout: float = 5.0, max_bytes: int | None = None) -> Any:
    base = _contract(url, auth=AuthSpec(scheme="bearer", secret_env="JOBWARDEN_EDGE_TEST_TOKEN"))
    limits = dataclasses.replace(base.limits, request_timeout_seconds=timeout)
    result = base.result
    if max_bytes is not None and result is not None:
        result = dataclasses.replace(result, max_bytes=max_bytes)
    return dataclasses.replace(base, limits=limits, result=result)


def _job(client: ProviderClient, contract: Any, behaviour: dict[str, Any]) -> str:
    """A sandbox job scripted with ``behaviour``, created through the edge itself."""
    create = ProviderRequest(
        purpose=RequestPurpose.create,
        method="POST",
        url=resolve_url(contract.base_url, "/v1/jobs"),
        headers={"Idempotency-Key": secrets.token_hex(8)},
        json_body={"behaviour": behaviour},
    )
    body = client.send(contract, create, trace_id="d" * 32).observation.body
    assert isinstance(body, dict), body
    return str(body["id"])


def _status(client: ProviderClient, contract: Any, job_id: str) -> RawResponse:
    url = resolve_url(contract.base_url, f"/v1/jobs/{job_id}")
    return client.send(contract, _get(url), trace_id="e" * 32)


@pytest.mark.parametrize("mode", ["drip", "drip_headers"])
def test_a_dripping_answer_ends_at_the_whole_request_deadline_not_per_read(
    secured: SandboxServer, mode: str
) -> None:
    # One byte per 100 ms: every read succeeds well within a per-read timeout, forever.
    contract = _secured_contract(secured.url, timeout=1.5)
    client = ProviderClient()
    try:
        job_id = _job(client, contract, {"hostile_status": mode, "drip_interval_seconds": 0.1})
        started = time.monotonic()
        raw = _status(client, contract, job_id)
        elapsed = time.monotonic() - started
        assert raw.observation.transport_failure is TransportFailure.read_timeout
        assert raw.observation.status_code is None and raw.content == b""
        assert 1.4 <= elapsed < 1.5 + 1.0
        # The cut connection is not reused: the next request on the client is answered.
        after = _status(client, contract, _job(client, contract, {}))
        assert after.observation.status_code == 200
    finally:
        client.close()


def test_a_huge_status_answer_is_cut_while_reading_at_the_answer_limit(
    secured: SandboxServer,
) -> None:
    contract = _secured_contract(secured.url)
    client = ProviderClient(answer_limit=64 * 1024)
    try:
        huge = 200 * 1024 * 1024
        job_id = _job(client, contract, {"hostile_status": "huge", "huge_bytes": huge})
        started = time.monotonic()
        raw = _status(client, contract, job_id)
        # 200 MB would take seconds to read even on loopback; the cut comes after 64 KiB.
        assert time.monotonic() - started < 1.0
    finally:
        client.close()
    assert raw.observation.status_code == 200
    assert raw.observation.body is None and raw.observation.body_problem == "too_large"
    assert len(raw.content) == 64 * 1024 + 1


def test_a_result_past_max_bytes_keeps_one_byte_more_so_validation_refuses_its_size(
    secured: SandboxServer,
) -> None:
    from jobwarden.models.results.validation import validate_result

    contract = _secured_contract(secured.url, max_bytes=100_000)
    client = ProviderClient()
    try:
        job_id = _job(
            client,
            contract,
            {"hostile_result": "huge", "huge_bytes": 5_000_000, "polls_to_finish": 1},
        )
        assert _status(client, contract, job_id).observation.status_code == 200
        request = ProviderRequest(
            purpose=RequestPurpose.result,
            method="GET",
            url=resolve_url(contract.base_url, f"/v1/jobs/{job_id}/result"),
        )
        raw = client.send(contract, request, trace_id="f" * 32)
    finally:
        client.close()
    assert raw.observation.body_problem == "too_large"
    assert len(raw.content) == 100_001
    assert contract.result is not None
    verdict = validate_result(
        contract.result,
        content=raw.content,
        content_type=raw.content_type,
        expected_sha256=None,
        declared_record_count=None,
    )
    assert not verdict.valid and verdict.problem == "result exceeds 100000 bytes"


def test_ten_thousand_nested_arrays_are_a_too_deep_observation_not_a_recursion_error(
    secured: SandboxServer,
) -> None:
    contract = _secured_contract(secured.url)
    client = ProviderClient()
    try:
        job_id = _job(client, contract, {"hostile_status": "deep_json"})
        raw = _status(client, contract, job_id)
    finally:
        client.close()
    assert raw.observation.status_code == 200
    assert raw.observation.body is None and raw.observation.body_problem == "too_deep"


def test_numbers_past_64_bits_are_read_exactly(secured: SandboxServer) -> None:
    contract = _secured_contract(secured.url)
    client = ProviderClient()
    try:
        job_id = _job(client, contract, {"hostile_status": "big_numbers"})
        body = _status(client, contract, job_id).observation.body
    finally:
        client.close()
    assert isinstance(body, dict)
    assert body["bytes_processed"] == 2**64 and body["records_seen"] == 2**70
    assert body["cost_estimate"] == 1e300 and body["status"] == "queued"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\xff\xfe{}", "undecodable"),  # not UTF-8
        (b'{"a": "\\u0000"}', "undecodable"),  # NUL: Postgres text and JSONB cannot hold it
        (b'{"a": "\\ud800"}', "undecodable"),  # a lone surrogate is not Unicode text
        (b'{"\\u0000": [{"b": 1}]}', "undecodable"),  # a key is text too
        (b'[1, {"c": "x\\udfff"}]', "undecodable"),
        (b'{"a": "\x00"}', "malformed_json"),  # raw, a control character JSON refuses
        (b'{"a": NaN}', "malformed_json"),  # json.loads would accept it; JSON does not
        (b'{"a": Infinity}', "malformed_json"),
        (b'{"a": 1e400}', "number_out_of_range"),  # a float would silently become inf
        (b'{"a": ' + b"9" * 5000 + b"}", "number_out_of_range"),
        (b'{"a": ' + b"[" * 65 + b"]" * 65 + b"}", "too_deep"),
        (b'{"a": [1, 2', "malformed_json"),
    ],
)
def test_an_unreadable_body_is_named_by_its_problem(data: bytes, problem: str) -> None:
    assert parse_json(data) == (None, problem)


def test_brackets_inside_strings_do_not_count_towards_depth() -> None:
    text = '{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\"[["}'
    assert json_depth(text) == 1
    assert parse_json(text.encode())[1] is None
    nested = "[" * 64 + "]" * 64
    assert json_depth(nested) == 64
    assert parse_json(b"\xef\xbb\xbf" + nested.encode()) == (json.loads(nested), None)


def test_a_gzip_answer_is_inflated_within_the_same_bound() -> None:
    # A 100 MB gzip bomb is about 100 KB on the wire: the bound applies after inflating.
    bomb = gzip.compress(b"[" + b" " * 100_000_000 + b"]", compresslevel=9)
    small = gzip.compress(b'{"status": "running"}')

    class Gzip(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            payload = bomb if self.path == "/bomb" else small
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Gzip)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    contract = _contract(url, auth=None)
    client = ProviderClient(answer_limit=1024 * 1024)
    try:
        bombed = client.send(contract, _get(f"{url}/bomb"), trace_id="a" * 32)
        fine = client.send(contract, _get(f"{url}/small"), trace_id="a" * 32)
    finally:
        client.close()
        server.shutdown()
        server.server_close()
    assert bombed.observation.body_problem == "too_large"
    assert len(bombed.content) == 1024 * 1024 + 1
    assert fine.observation.body == {"status": "running"}


@pytest.mark.parametrize(
    "reference",
    ["/v1/jobs/job_1/result\nx", "/v1/jobs/job_1/result\tx", "/v1/jobs/job_1\r\nX-Injected: 1"],
)
def test_a_reference_with_control_characters_is_an_observation_and_never_sent(
    secured: SandboxServer, reference: str
) -> None:
    contract = _secured_contract(secured.url)
    client = ProviderClient()
    request = ProviderRequest(
        purpose=RequestPurpose.result, method="GET", url=secured.url + reference
    )
    try:
        raw = client.send(contract, request, trace_id="a" * 32)
    finally:
        client.close()
    assert raw.observation.status_code is None
    assert raw.observation.transport_failure is TransportFailure.protocol
    assert secured.requests() == []


@pytest.mark.parametrize(
    ("url", "headers"),
    [
        ("ftp://127.0.0.1/v1/jobs/x", {}),  # UnsupportedProtocol
        ("http://[::1/v1/jobs/x", {}),  # InvalidURL: a broken host
        ("{base}/v1/jobs/x", {"X-Note": "caf\u00e9"}),  # httpx encodes header values as ASCII
        ("{base}/v1/jobs/x", {"X-Note": "a\r\nX-Injected: 1"}),  # h11 refuses CR/LF
    ],
)
def test_every_request_error_is_an_observation_not_an_exception(
    secured: SandboxServer, url: str, headers: dict[str, str]
) -> None:
    contract = _secured_contract(secured.url)
    client = ProviderClient()
    request = ProviderRequest(
        purpose=RequestPurpose.status,
        method="GET",
        url=url.format(base=secured.url),
        headers=headers,
    )
    try:
        raw = client.send(contract, request, trace_id="a" * 32)
    finally:
        client.close()
    assert raw.observation.transport_failure is TransportFailure.protocol
    assert secured.requests() == []


@pytest.mark.parametrize(
    ("source", "value", "problem"),
    [
        ("env", "tok-0123456789\r\nX-Injected: 1", "control character"),
        ("env", "tok-0123456789\nsecond-line", "control character"),
        ("file", "tok-01234\x0056789", "control character"),  # the environment cannot hold NUL
        ("file", "tok-0123\r\n456789", "control character"),
        ("env", "tok-0123456789-\u00e9t\u00e9", "non-ASCII"),
        ("file", "tok-0123456789-\u2603", "non-ASCII"),
    ],
)
def test_an_unusable_credential_gives_up_naming_its_source_never_the_value(
    secured: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    source: str,
    value: str,
    problem: str,
) -> None:
    if source == "env":
        monkeypatch.setenv("JOBWARDEN_EDGE_TEST_TOKEN", value)
        contract = _secured_contract(secured.url)
        named = "JOBWARDEN_EDGE_TEST_TOKEN"
    else:
        secret_file = tmp_path / "token"
        secret_file.write_text(value, encoding="utf-8")
        auth = AuthSpec(scheme="bearer", secret_file=str(secret_file))
        contract = _contract(secured.url, auth=auth)
        named = str(secret_file)
    client = ProviderClient()
    try:
        with pytest.raises(GiveUpError) as caught:
            _status(client, contract, "job_1")
    finally:
        client.close()
    message = str(caught.value)
    assert named in message and problem in message
    assert "tok-" not in message and "tok-" not in repr(caught.value.args)
    assert secured.requests() == []
    # Never sent, but still scrubbed by value should a provider have it from elsewhere.
    assert value.strip() in secret_forms(contract)


def test_a_secret_file_that_is_not_utf8_gives_up_naming_the_file(
    tmp_path: Path, secured: SandboxServer
) -> None:
    secret_file = tmp_path / "token"
    secret_file.write_bytes(b"tok-\xff\xfe-0123456789")
    contract = _contract(secured.url, auth=AuthSpec(scheme="bearer", secret_file=str(secret_file)))
    client = ProviderClient()
    try:
        with pytest.raises(GiveUpError, match=str(secret_file)):
            _status(client, contract, "job_1")
    finally:
        client.close()
    assert secured.requests() == []


def test_no_log_record_at_any_level_holds_the_credential(
    secured: SandboxServer, caplog: pytest.LogCaptureFixture
) -> None:
    """httpcore's DEBUG trace prints response headers; the provider here echoes the
    credential in a header and the body. With the root logger at DEBUG, no record
    (from httpx, httpcore or anyone) may hold it in any form."""
    contract = _secured_contract(secured.url)
    forms = secret_forms(contract)
    assert SECRET in forms
    caplog.set_level(logging.DEBUG)  # the root logger, as an operator debugging would
    client = ProviderClient()
    try:
        job_id = _job(client, contract, {"hostile_status": "echo_credential"})
        raw = _status(client, contract, job_id)
        # An unusable header value makes h11 raise with the value in its message.
        bad = ProviderRequest(
            purpose=RequestPurpose.status,
            method="GET",
            url=resolve_url(contract.base_url, f"/v1/jobs/{job_id}"),
            headers={"X-Copy": f"{SECRET}\r\n"},
        )
        client.send(contract, bad, trace_id="a" * 32)
    finally:
        client.close()
    assert raw.observation.headers["x-echoed-authorization"] == f"Bearer {SECRET}"
    assert logging.getLogger("any.library").isEnabledFor(logging.DEBUG)  # DEBUG really was on
    for record in caplog.records:
        text = record.getMessage() + repr(record.args) + str(record.exc_info)
        assert not any(form in text for form in forms), (record.name, text[:200])


def test_the_http_library_loggers_stay_at_warning_whatever_the_root_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    assert logging.getLogger("any.library").isEnabledFor(logging.DEBUG)
    for name in ("httpx", "httpcore", "httpcore.http11", "httpcore.connection"):
        assert not logging.getLogger(name).isEnabledFor(logging.INFO), name


def test_an_http_proxy_from_the_environment_is_honoured_and_no_proxy_bypasses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with SandboxServer() as proxy, SandboxServer() as direct:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        client = ProviderClient()
        contract = _contract("http://provider.invalid", auth=None)
        try:
            # A forward proxy gets the absolute URL; the sandbox answers it as if it were the host.
            via = client.send(
                contract, _get("http://provider.invalid/v1/jobs/j1"), trace_id="a" * 32
            )
            bypassed = client.send(contract, _get(f"{direct.url}/v1/jobs/j2"), trace_id="a" * 32)
        finally:
            client.close()
        assert via.observation.status_code == 404 and bypassed.observation.status_code == 404
        assert [(r["path"], r["host"]) for r in proxy.requests()] == [
            ("/v1/jobs/j1", "provider.invalid")
        ]
        assert [r["path"] for r in direct.requests()] == ["/v1/jobs/j2"]


def test_the_edge_frames_requests_as_httpx_did_and_reads_headers_as_httpx_does() -> None:
    # What leaves is httpx.Client's framing (issue 19, item 4; on httpcore's pool directly,
    # issue 12, it was the edge's own): Host with the port, Content-Length (0 for a
    # bodiless POST), keep-alive, and the edge's User-Agent.
    # Answers: a repeated header joined with ", " (RFC 9110 section 5.3), names
    # lower-cased, one decoding for all (ASCII, else UTF-8, else ISO-8859-1), and a
    # Set-Cookie never sent back: the cookie jar refuses every cookie.
    seen: list[tuple[str, str, dict[str, str], bytes]] = []

    class Recorder(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            seen.append(
                (self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            payload = b'{"status": "running"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Warning", "199 - one")
            self.send_header("Warning", "199 - two")
            self.send_header("Set-Cookie", "planted=1; Path=/")
            self.send_header("X-Label", "caf\u00e9")  # Latin-1 on the wire (http.server)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}"
    contract = _contract(url, auth=None)
    client = ProviderClient()
    create = ProviderRequest(
        purpose=RequestPurpose.create, method="POST", url=f"{url}/v1/jobs", json_body={"a": 1}
    )
    cancel = ProviderRequest(purpose=RequestPurpose.cancel, method="POST", url=f"{url}/v1/x")
    try:
        first = client.send(contract, _get(f"{url}/v1/jobs/job_1?view=full"), trace_id="a" * 32)
        client.send(contract, create, trace_id="a" * 32)
        client.send(contract, cancel, trace_id="a" * 32)
    finally:
        client.close()
        server.shutdown()
        server.server_close()
    (get_method, get_path, get_headers, _), (_, _, post_headers, post_body), cancelled = seen
    assert (get_method, get_path) == ("GET", "/v1/jobs/job_1?view=full")
    assert get_headers["host"] == f"127.0.0.1:{port}"
    assert get_headers["connection"] == "keep-alive"
    assert get_headers["user-agent"].startswith("jobwarden")
    assert get_headers["accept"] == "application/json"
    assert "content-length" not in get_headers
    assert post_body == b'{"a":1}' and post_headers["content-length"] == str(len(post_body))
    assert post_headers["content-type"] == "application/json"
    assert cancelled[2]["content-length"] == "0" and cancelled[3] == b""
    assert "cookie" not in post_headers and "cookie" not in cancelled[2]
    headers = first.observation.headers
    assert headers["warning"] == "199 - one, 199 - two"
    assert headers["x-label"] == "caf\u00e9"  # not UTF-8, so all are read as ISO-8859-1
    assert first.observation.body == {"status": "running"}


def test_a_rotated_credential_is_scrubbed_by_its_own_forms_from_the_next_plan_on(
    tmp_path: Path,
) -> None:
    # The forms are derived once per value read (every plan asks for them), never kept past
    # a rotation: the file is read again on every call.
    secret_file = tmp_path / "token"
    secret_file.write_text("tok-before-0123456789", encoding="utf-8")
    contract = _contract(
        "http://127.0.0.1:9", auth=AuthSpec(scheme="bearer", secret_file=str(secret_file))
    )
    before = secret_forms(contract)
    assert "tok-before-0123456789" in before and secret_forms(contract) == before
    secret_file.write_text("tok-after-9876543210", encoding="utf-8")
    after = secret_forms(contract)
    assert "tok-after-9876543210" in after
    assert not set(before) & set(after)
    assert auth_headers(contract) == {"Authorization": "Bearer tok-after-9876543210"}
    secret_file.write_text("tok-after-\r\n-9876543210", encoding="utf-8")
    with pytest.raises(GiveUpError, match="control character"):
        auth_headers(contract)
