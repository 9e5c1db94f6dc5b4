"""The provider edge's client spans with tracing on, in a process of their own (tracing
is set up once per process and global): the OpenTelemetry httpx instrumentation's span
for a plain request, jobwarden's own for a request a provider plugin signs.

A plugin signs the final request, ``traceparent`` included; the instrumentation injects
its ``traceparent`` in the transport, after the plugin. So for a plugin's request the
instrumentation is suppressed and the header the provider receives is the one signed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jobwarden.demo.harness import REPO

SCRIPT = r'''
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobwarden.models.actions import ProviderRequest, RequestPurpose
from jobwarden.models.contracts.plugins import OutboundRequest
from jobwarden.observability import telemetry
from jobwarden.tasks.provider.edge import ProviderClient
from tests.integration.test_provider_edge import _contract

received = []


class Recorder(BaseHTTPRequestHandler):
    def do_GET(self):
        received.append({"path": self.path, "traceparent": self.headers.get("traceparent"),
                         "signed": self.headers.get("X-Signed-Traceparent")})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


class SignsTheTraceparent:
    """Signs what it sees: here, a copy of the traceparent the request will carry."""

    def prepare_request(self, request: OutboundRequest) -> OutboundRequest:
        return request.with_headers({"X-Signed-Traceparent": request.headers["traceparent"]})


assert telemetry.setup("edge-test")
memory = InMemorySpanExporter()
trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(memory))
server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_address[1]}"
contract = _contract(url, auth=None)
plain = ProviderClient()
signed = ProviderClient({contract.name: SignsTheTraceparent()})
tracer = trace.get_tracer("test")
with tracer.start_as_current_span("jobwarden.step poll") as step:
    trace_id = f"{step.get_span_context().trace_id:032x}"
    for client in (plain, signed):
        request = ProviderRequest(
            purpose=RequestPurpose.status, method="GET", url=url + "/v1/jobs/j1?sig=secret"
        )
        answer = client.send(contract, request, trace_id=trace_id)
        assert answer.observation.status_code == 200, answer
plain.close()
signed.close()
server.shutdown()
spans = [
    {
        "scope": s.instrumentation_scope.name,
        "kind": s.kind.name,
        "span_id": f"{s.context.span_id:016x}",
        "parent_id": f"{s.parent.span_id:016x}" if s.parent else None,
        "attributes": dict(s.attributes),
    }
    for s in memory.get_finished_spans()
]
step_id = f"{step.get_span_context().span_id:016x}"
with open(sys.argv[1], "w") as out:
    json.dump({"spans": spans, "received": received, "step": step_id}, out)
'''


def test_a_plain_request_is_the_httpx_instrumentations_span_a_signed_one_ours(
    tmp_path: Path,
) -> None:
    out = tmp_path / "spans.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        # Spans also go to the console exporter (stdout, ignored); the test reads the
        # in-memory copy the script adds.
        "OTEL_TRACES_EXPORTER": "console",
    }
    # telemetry.setup chooses the stable HTTP conventions unless the operator did.
    env.pop("OTEL_SEMCONV_STABILITY_OPT_IN", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    clients = [s for s in found["spans"] if s["kind"] == "CLIENT"]
    by_id = {s["span_id"]: s for s in clients}
    plain, signed = found["received"]
    # Each request left with the traceparent of exactly one client span, a child of the step.
    assert len(clients) == 2
    assert all(s["parent_id"] == found["step"] for s in clients)
    ours = by_id[plain["traceparent"].split("-")[2]]
    assert ours["scope"] == "opentelemetry.instrumentation.httpx"
    assert ours["attributes"]["jobwarden.request"] == "status"
    # The stable HTTP conventions, the query (a presigned signature) left out.
    assert ours["attributes"]["url.full"].endswith("/v1/jobs/j1")
    assert ours["attributes"]["http.response.status_code"] == 200
    theirs = by_id[signed["traceparent"].split("-")[2]]
    assert theirs["scope"] == "jobwarden"
    assert theirs["attributes"]["jobwarden.request"] == "status"
    assert "?" not in theirs["attributes"]["url.full"]
    # What the plugin signed is what the provider received.
    assert signed["signed"] == signed["traceparent"]
