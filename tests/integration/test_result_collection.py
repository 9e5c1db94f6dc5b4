"""A result download streamed through the edge into the result store (issue 21), against
a real HTTP server and a real S3-compatible server (moto's, tests/s3_server.py): stored
with the digest the core computed on the way; the store going away mid-upload is a
``result_store`` transport failure that the collect decision counts against the
transport budget and retries, and nothing is recorded as the result."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jobwarden.models.actions import ProviderRequest, RequestPurpose, Wait
from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.operation import Operation
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.provider.signals import TransportFailure
from jobwarden.models.results.decisions import after_collect
from jobwarden.models.results.validation import Collected
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.provider.edge import ProviderClient
from jobwarden.tasks.provider.transport import BodyState
from jobwarden.tasks.results.collection import collector
from jobwarden.tasks.results.store import ResultStore
from jobwarden.tasks.runtime import step_contexts
from tests.s3_server import S3Server
from tests.unit.factories import NOW, operation

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"
MIB = 1024 * 1024


def _document(items: int) -> bytes:
    rows = [{"id": f"item-{n}", "value": "x" * 40} for n in range(items)]
    return json.dumps({"record_count": items, "items": rows, "failed_items": []}).encode()


class _Serving:
    def __init__(self, body: bytes) -> None:
        self.body = body

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                for start in range(0, len(body), MIB):
                    self.wfile.write(body[start : start + MIB])

            def log_message(self, *args: object) -> None:
                pass

        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a download the client dropped (the store went away) is expected

        self.server = Quiet(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Serving:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[tuple[S3Server, str]]:
    server = S3Server.start(tmp_path)
    bucket = f"jobwarden-collect-{secrets.token_hex(4)}"
    server.create_bucket(bucket)
    try:
        yield server, bucket
    finally:
        server.stop()


def _setup(
    url: str, body: bytes
) -> tuple[ProviderContract, StepContext, Operation, ProviderRequest]:
    base = load_contract(SHIPPED / "sandbox.toml")
    assert base.result is not None
    result = dataclasses.replace(base.result, max_bytes=64 * MIB)
    contract = dataclasses.replace(base, base_url=url, base_url_env=None, auth=None, result=result)
    ctx = step_contexts({"sandbox": contract}, {}, {})["sandbox"]
    expected = {"expected_sha256": hashlib.sha256(body).hexdigest()}
    op = operation(
        S.result_collecting,
        tenant=f"collect-{secrets.token_hex(3)}",
        validation_summary={"expected": expected},
        result_fetch_attempts=1,
    )
    request = ProviderRequest(purpose=RequestPurpose.result, method="GET", url=f"{url}/result")
    return contract, ctx, op, request


def test_a_result_streams_through_the_edge_into_s3_with_the_digest_judged_on_the_way(
    s3: tuple[S3Server, str],
) -> None:
    server, bucket = s3
    body = _document(60_000)  # about 3.6 MB: stored, not inline
    store = ResultStore.from_url(f"s3://{bucket}/results", environ=server.environ())
    with _Serving(body) as provider:
        contract, ctx, op, request = _setup(provider.url, body)
        answer = ProviderClient().send(
            contract, request, trace_id="0" * 32, collect=collector(store, op, ctx)
        )
    collected = answer.collected
    assert collected is not None and collected.verdict.valid, collected
    assert collected.inline is None and answer.content == b""
    assert collected.location is not None and collected.location.startswith(f"s3://{bucket}/")
    assert (collected.verdict.sha256, collected.verdict.size_bytes) == (
        hashlib.sha256(body).hexdigest(),
        len(body),
    )
    assert b"".join(store.read(collected.location)) == body
    decided = after_collect(op, ctx, request, answer, NOW, 0.5)
    assert decided.action.location == collected.location  # type: ignore[union-attr]


def test_the_store_going_away_mid_download_is_retried_under_the_transport_budget(
    s3: tuple[S3Server, str],
) -> None:
    server, bucket = s3
    body = _document(400_000)  # about 24 MB: three 8 MiB parts
    store = ResultStore.from_url(
        f"s3://{bucket}/results", environ=server.environ(), timeout_seconds=5, max_retries=1
    )
    with _Serving(body) as provider:
        contract, ctx, op, request = _setup(provider.url, body)
        inner = collector(store, op, ctx)
        seen = 0

        def killing(
            headers: Mapping[str, str], chunks: Iterator[bytes], state: BodyState
        ) -> Collected:
            def chunks_until_killed() -> Iterator[bytes]:
                nonlocal seen
                for chunk in chunks:
                    seen += len(chunk)
                    if seen > 10 * MIB:
                        server.kill()  # after the first part: the upload is under way
                    yield chunk

            return inner(headers, chunks_until_killed(), state)

        answer = ProviderClient().send(contract, request, trace_id="0" * 32, collect=killing)
    assert answer.observation.transport_failure is TransportFailure.result_store
    assert answer.collected is None and seen < len(body)
    decided = after_collect(op, ctx, request, answer, NOW, 0.5)
    # A failed download is not a failed job: counted, and tried again later.
    assert isinstance(decided.action, Wait)
    assert decided.changes == {"transport_failures_used": op.transport_failures_used + 1}


def test_an_assembled_paged_result_over_the_inline_limit_is_written_to_the_store(
    tmp_path: Path,
) -> None:
    # Issue 34: a paged final result is one artifact; above what a row keeps inline it goes
    # to the result store (a directory store here) and the success records where it is.
    from jobwarden.models.actions import Decided, Succeed
    from jobwarden.models.results.validation import INLINE_LIMIT, ResultVerdict
    from jobwarden.tasks.results.collection import stored_whole

    store = ResultStore.from_url((tmp_path / "results").as_uri(), environ={})
    content = json.dumps({"value": ["x" * 100] * (INLINE_LIMIT // 100 + 10)}).encode()
    verdict = ResultVerdict(
        valid=True,
        problem=None,
        sha256=hashlib.sha256(content).hexdigest(),
        size_bytes=len(content),
    )
    succeed = Succeed(verdict=verdict, content=content, content_type="application/json")
    op = operation(S.result_collecting)
    decided = stored_whole(store, op, Decided(action=succeed))
    action = decided.action
    assert isinstance(action, Succeed) and action.content is None and action.location
    assert b"".join(store.read(action.location)) == content
    small = Succeed(verdict=verdict, content=b"{}", content_type="application/json")
    assert stored_whole(store, op, Decided(action=small)).action == small


def test_a_fetched_first_page_over_the_inline_limit_is_still_paged(tmp_path: Path) -> None:
    # Issue 34: a final result fetched from a URL (an ARM resourceLocation) that is the
    # first page of a list ([ARM-PAGING] "nextLink") is paged even when it streamed into
    # the store: the collector holds it whole up to the paging bound for its next link.
    from jobwarden.models.actions import Record
    from jobwarden.models.results.validation import INLINE_LIMIT

    store = ResultStore.from_url((tmp_path / "results").as_uri(), environ={})
    rows = [{"id": f"item-{n}", "value": "x" * 40} for n in range(2000)]
    # Relative: resolved against the URL that answered (RFC 3986 section 5).
    body = json.dumps({"value": rows, "nextLink": "page2"}).encode()
    assert len(body) > INLINE_LIMIT
    with _Serving(body) as provider:
        base = load_contract(SHIPPED / "azure_arm.toml")
        contract = dataclasses.replace(base, base_url=provider.url, base_url_env=None, auth=None)
        ctx = step_contexts({"azure_arm": contract}, {}, {})["azure_arm"]
        op = operation(
            S.result_collecting,
            provider="azure_arm",
            tenant=f"collect-{secrets.token_hex(3)}",
            validation_summary={"expected": {"final": "url"}},
            result_fetch_attempts=1,
        )
        url = f"{provider.url}/export"
        request = ProviderRequest(purpose=RequestPurpose.result, method="GET", url=url)
        answer = ProviderClient().send(
            contract, request, trace_id="0" * 32, collect=collector(store, op, ctx)
        )
    assert answer.collected is not None and answer.collected.location is not None
    decided = after_collect(op, ctx, request, answer, NOW, 0.5)
    assert isinstance(decided.action, Record), decided.action
    summary = decided.changes["validation_summary"]
    assert summary is not None
    paging = summary["expected"]["paging"]
    assert (len(paging["items"]), paging["next"]) == (2000, f"{provider.url}/page2")
