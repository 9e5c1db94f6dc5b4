"""A tiny OTLP/HTTP trace receiver for tests: what real processes export, decoded.

The processes under test (the API, Celery workers) run the OpenTelemetry SDK with the
OTLP exporter configured by the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT points
here). Each POST /v1/traces body is an ExportTraceServiceRequest (protobuf, the
opentelemetry-proto package the exporter itself uses); its spans are kept as plain
dicts. Loopback only, a free port, stopped by the context manager.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Received:
    spans: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of_trace(self, trace_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.spans if s["trace_id"] == trace_id]


def _decode(body: bytes) -> list[dict[str, Any]]:
    request = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_id": span.parent_span_id.hex() or None,
                        "name": span.name,
                        "kind": span.kind,
                        "service": resource.get("service.name"),
                        "scope": scope_spans.scope.name,
                        "attributes": {
                            a.key: a.value.string_value or a.value.int_value
                            for a in span.attributes
                        },
                    }
                )
    return spans


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/v1/traces":
                spans = _decode(body)
                with received.lock:
                    received.spans.extend(spans)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_: Any) -> None:
            pass  # quiet: the test reads what was received, not the access log

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
