"""The sandbox provider: a real HTTP server simulating an async job API with scripted faults.

Standard library only (``http.server``), so that dropping connections and
holding responses stay under our control. ``HTTP/1.1`` with an exact
``Content-Length`` on every answer, so keep-alive clients work.

Routes::

    POST /v1/jobs                    create (Idempotency-Key header required)
    GET  /v1/jobs?reference=KEY      lookup by idempotency key
    GET  /v1/jobs/{id}               status
    POST /v1/jobs/{id}/cancel        cancel (DELETE /v1/jobs/{id} is an alias)
    GET  /v1/jobs/{id}/result        result document (presigned / one-time on request)
    DELETE /v1/jobs/{id}/resources   cleanup of what a failed/cancelled/expired job left
    GET  /v1/jobs/{id}/resources     whether those resources still exist (404: gone)
    GET  /v1/files/{file_id}/content OpenAI Batch error file (file-err-{job id})
    GET  /_sandbox/requests?key=&job=   request log (JSON list)
    GET  /_sandbox/jobs?key=            remote jobs (JSON list)
    GET  /_sandbox/webhooks?job=        webhook deliveries sent and their answers (JSON list)
    POST /_sandbox/reset                forget all jobs and the log

A scripted outage (``SandboxServer.outage(503)``) answers every status read with that
status, logged as always, until it is ended (``outage(None)``).

The ``/_sandbox`` endpoints never need the bearer token and are not logged.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import re
import signal
import socket
import sys
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from jobwarden.demo.sandbox import conventions
from jobwarden.demo.sandbox.downloads import one_auth_mechanism
from jobwarden.demo.sandbox.replies import Reply, error_reply, json_reply
from jobwarden.demo.sandbox.state import SandboxState

__all__ = ["SandboxServer", "serve"]

_JOB_PATH = re.compile(r"^/v1/jobs/(?P<id>[^/]+)(?P<action>/cancel|/result|/resources)?/?$")
# OpenAI Files API: GET /v1/files/{file_id}/content (the batch's error_file_id).
_FILE_PATH = re.compile(r"^/v1/files/(?P<id>[^/]+)/content/?$")
_MAX_BODY = 10 * 1024 * 1024


def received_headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers as received, in order; the credential only as ``sha256:<hex>`` of its
    value, so a test can check it without the log ever holding it."""
    return [
        (name, "sha256:" + hashlib.sha256(value.encode()).hexdigest())
        if name.lower() == "authorization"
        else (name, value)
        for name, value in items
    ]


def classify(method: str, path: str) -> tuple[str, str | None]:
    """Map a request to (kind, job_id)."""
    if path.rstrip("/") == "/v1/jobs":
        if method == "POST":
            return "create", None
        if method == "GET":
            return "lookup", None
        return "other", None
    files = _FILE_PATH.match(path)
    if files is not None and method == "GET":
        # Logged against the job whose error file it is, so a job's log shows the fetch.
        file_id = unquote(files["id"])
        prefix = conventions.ERROR_FILE_PREFIX
        return "error_file", file_id[len(prefix) :] if file_id.startswith(prefix) else None
    match = _JOB_PATH.match(path)
    if match is None:
        return "other", None
    job_id, action = match["id"], match["action"]
    if action is None and method == "GET":
        return "status", job_id
    if (action == "/cancel" and method == "POST") or (action is None and method == "DELETE"):
        return "cancel", job_id
    if action == "/result" and method == "GET":
        return "result", job_id
    if action == "/resources":
        if method == "DELETE":
            return "cleanup", job_id
        if method == "GET":
            return "resources", job_id
    return "other", job_id


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() must not wait for idle keep-alive connections
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], state: SandboxState, token: str | None) -> None:
        self.state = state
        self.token = token
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def track(self, conn: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(conn)

    def untrack(self, conn: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(conn)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            _shutdown(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # client went away: not our problem
        super().handle_error(request, client_address)


def _shutdown(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "jobwarden-sandbox/1"
    # Headers and body leave in one write (buffered wfile, flushed per answer) and
    # Nagle is off: otherwise delayed ACKs cost ~40 ms per keep-alive request.
    wbufsize = -1
    disable_nagle_algorithm = True
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log is the record."""

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.untrack(self.connection)

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:  # BrokenPipe, ConnectionReset, timeouts: the client left
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    # ------------------------------------------------------------ plumbing
    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > _MAX_BODY:
            raise ValueError("bad Content-Length")
        return self.rfile.read(length) if length else b""

    def _drop(self) -> None:
        self.close_connection = True
        _shutdown(self.connection)

    def _send(self, reply: Reply) -> None:
        length = reply.length if reply.stream is not None else len(reply.body)
        if reply.drip_headers:
            self._drip(self._head(reply, length) + reply.body, reply.drip_seconds)
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.status != 204:
            # RFC 9110, 8.6: no Content-Length in a 204 (it has no content to measure).
            self.send_header("Content-Length", str(length))
        self.end_headers()
        if reply.drip_seconds > 0:
            self.wfile.flush()
            self._drip(reply.body, reply.drip_seconds)
            return
        if reply.cut_after is not None:
            # The full Content-Length was promised; part of it arrives, then the close.
            self.wfile.write(self._prefix(reply, reply.cut_after))
            self.wfile.flush()
            self._drop()
            return
        if reply.stream is not None:
            # Generated while written: a huge answer never sits in the sandbox's memory.
            for chunk in reply.stream():
                if self.server.stopping.is_set():
                    self._drop()
                    return
                self.wfile.write(chunk)
        else:
            self.wfile.write(reply.body)
        self.wfile.flush()

    @staticmethod
    def _prefix(reply: Reply, size: int) -> bytes:
        """The first ``size`` bytes of the body, streamed or held."""
        if reply.stream is None:
            return reply.body[:size]
        taken = bytearray()
        for chunk in reply.stream():
            taken += chunk[: size - len(taken)]
            if len(taken) >= size:
                break
        return bytes(taken)

    def _head(self, reply: Reply, length: int) -> bytes:
        lines = [f"{self.protocol_version} {reply.status} {self.responses[reply.status][0]}"]
        lines += [f"{name}: {value}" for name, value in reply.headers.items()]
        lines.append(f"Content-Length: {length}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _drip(self, data: bytes, interval: float) -> None:
        """One byte per ``interval``; stops when the client leaves or the server stops."""
        for i in range(len(data)):
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()  # raises once the client is gone: handle() ends the connection
            if self.server.stopping.wait(interval):
                self._drop()
                return

    def _dispatch(self) -> None:
        try:
            body = self._read_body()
        except (ValueError, OSError):
            self._drop()
            return
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        if path.startswith("/_sandbox/"):
            self._send(self._control(path, query))
            return
        state = self.server.state
        kind, job_id = classify(self.command, path)
        seq = state.log_request(
            method=self.command,
            path=path,
            query=parts.query or None,
            kind=kind,
            idempotency_key=self.headers.get("Idempotency-Key"),
            job_id=job_id,
            traceparent=self.headers.get("traceparent"),
            host=self.headers.get("Host"),
            authorized="Authorization" in self.headers,
            first_sent=self.headers.get("Repeatability-First-Sent"),
            accept_encoding=self.headers.get("Accept-Encoding"),
            headers=received_headers(self.headers.items()),
            body_b64=base64.b64encode(body).decode(),
        )
        try:
            reply = self._route(seq, kind, job_id, path=path, query=query, body=body)
        except Exception as exc:  # a sandbox bug must still answer, and visibly
            reply = error_reply(500, "sandbox_bug", repr(exc))
        try:
            self._deliver(seq, job_id, reply)
        finally:
            # Answered, dropped or abandoned by the client: how long the exchange lasted.
            state.ended(seq)

    def _deliver(self, seq: int, job_id: str | None, reply: Reply) -> None:
        state = self.server.state
        if reply.drop:
            self._drop()
            return
        if reply.hold_seconds > 0:
            self.server.stopping.wait(reply.hold_seconds)  # never under the state lock
        if reply.reprocess_status and job_id is not None:
            reply = state.status(
                seq,
                job_id,
                after_hold=True,
                authorization=self._authorization,
                origin=self._origin,
            )
        # Fill the log before writing, so a client that has its answer sees it logged.
        state.answered(seq, reply.status, reply.headers.get("Retry-After"))
        self._send(reply)

    @property
    def _authorization(self) -> str | None:
        return self.headers.get("Authorization")

    @property
    def _origin(self) -> str:
        """This server as the client addressed it: absolute result URLs are built on it."""
        return f"http://{self.headers.get('Host') or '127.0.0.1'}"

    def _authorized(self) -> bool:
        token = self.server.token
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())

    def _route(
        self,
        seq: int,
        kind: str,
        job_id: str | None,
        *,
        path: str,
        query: dict[str, list[str]],
        body: bytes,
    ) -> Reply:
        state = self.server.state
        # A presigned result URL authenticates itself, as on S3: no bearer token, and both
        # at once refused (the provider's credential must not travel with such a URL).
        presigned = kind == "result" and "X-Amz-Signature" in query
        if presigned and "Authorization" in self.headers:
            return one_auth_mechanism()
        if path.startswith("/v1") and not presigned and not self._authorized():
            return error_reply(
                401,
                "unauthorized",
                "missing or wrong bearer token",
                **{"WWW-Authenticate": "Bearer"},
            )
        if kind == "create":
            return state.create(
                seq,
                self.headers.get("Idempotency-Key"),
                body,
                first_sent=self.headers.get("Repeatability-First-Sent"),
            )
        if kind == "lookup":
            return state.lookup(seq, _first(query, "reference"))
        if kind == "error_file":
            return state.error_file(seq, job_id)
        if job_id is not None:
            if kind == "status" and state.outage is not None:
                return error_reply(state.outage, "outage", "the provider is down (scripted)")
            if kind == "status":
                return state.status(
                    seq, job_id, authorization=self._authorization, origin=self._origin
                )
            if kind == "cancel":
                return state.cancel(seq, job_id)
            if kind == "result":
                return state.result(seq, job_id, path=path, query=query)
            if kind == "cleanup":
                return state.cleanup(seq, job_id)
            if kind == "resources":
                return state.resources(seq, job_id)
            return error_reply(405, "method_not_allowed", f"{self.command} {path}")
        return error_reply(404, "not_found", f"no route {self.command} {path}")

    def _control(self, path: str, query: dict[str, list[str]]) -> Reply:
        state = self.server.state
        route = (self.command, path.rstrip("/"))
        if route == ("GET", "/_sandbox/requests"):
            entries = state.requests(key=_first(query, "key"), job_id=_first(query, "job"))
            return json_reply(200, entries)
        if route == ("GET", "/_sandbox/webhooks"):
            return json_reply(200, state.webhooks.deliveries(_first(query, "job")))
        if route == ("GET", "/_sandbox/jobs"):
            return json_reply(200, state.jobs_for_key(_first(query, "key")))
        if route == ("POST", "/_sandbox/reset"):
            state.reset()
            return json_reply(200, {"reset": True})
        return error_reply(404, "not_found", f"no route {self.command} {path}")


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


class SandboxServer:
    """An in-process sandbox provider on a free (or given) port.

    Usage::

        with SandboxServer() as sandbox:
            httpx.post(f"{sandbox.url}/v1/jobs", ...)
            assert len(sandbox.jobs_for_key("k")) == 1
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str | None = None,
        webhook_secret: str | None = None,
    ) -> None:
        self._state = SandboxState(webhook_secret)
        self._httpd = _HTTPServer((host, port), self._state, token)
        self._thread: threading.Thread | None = None
        self._stopped = False

    @property
    def url(self) -> str:
        address = self._httpd.server_address
        host, port = str(address[0]), int(address[1])
        if host in ("0.0.0.0", "", "::"):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"

    def start(self) -> None:
        if self._thread is not None or self._stopped:
            raise RuntimeError("a SandboxServer can be started once")
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"sandbox-{self._httpd.server_address[1]}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._httpd.stopping.set()  # wake held responses
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.close_connections()
        self._httpd.server_close()
        self._state.webhooks.stop()

    def serve_forever(self) -> None:
        """Serve on the calling thread until interrupted (used by :func:`serve`)."""
        try:
            self._httpd.serve_forever(poll_interval=0.2)
        finally:
            self.stop()

    def requests(
        self, *, key: str | None = None, job_id: str | None = None
    ) -> list[dict[str, Any]]:
        return self._state.requests(key=key, job_id=job_id)

    def jobs_for_key(self, key: str) -> list[dict[str, Any]]:
        return self._state.jobs_for_key(key)

    def webhook_deliveries(self, job_id: str | None = None) -> list[dict[str, Any]]:
        """Every webhook delivery the sandbox attempted (for one job), with its answer."""
        return self._state.webhooks.deliveries(job_id)

    def reset(self) -> None:
        self._state.reset()

    def outage(self, status: int | None) -> None:
        """Answer every status read with ``status`` (say 503) from now; None ends it."""
        self._state.outage = status

    def __enter__(self) -> SandboxServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def serve(host: str, port: int, token: str | None, webhook_secret: str | None = None) -> None:
    """Run the sandbox in the foreground until Ctrl-C (for ``jobwarden sandbox``)."""
    server = SandboxServer(host, port, token=token, webhook_secret=webhook_secret)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # stop cleanly under a supervisor too
    print(f"jobwarden sandbox listening on {server.url}", file=sys.stderr, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
