"""Receivers for the notification tests: a real HTTP server on a free port that records
what reaches it, one that accepts and never answers, and operations to notify about."""

from __future__ import annotations

import base64
import contextlib
import secrets
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jobwarden.models.actions import Decided, EscalationReason, escalate
from jobwarden.models.effects import plan
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import notification_store, store
from jobwarden.models.persistence.db import step_session, transaction
from jobwarden.models.reservations import settled
from jobwarden.models.states import OperationState as S
from tests.integration.factories import insert_in


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def receiving(port: int | None = None, status: int = 204) -> Iterator[Receiver]:
    """A real HTTP server on 127.0.0.1 recording every request, answering ``status``."""
    port = port or free_port()
    receiver = Receiver(url=f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            receiver.requests.append(
                Received(path=self.path, headers=dict(self.headers.items()), body=body)
            )
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()
            receiver.arrived.set()

        def log_message(self, *args: object) -> None:
            pass  # the test reads the requests, not the access log

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def hanging() -> Iterator[Receiver]:
    """Accepts connections and never answers (until the test ends)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    receiver = Receiver(url=f"http://127.0.0.1:{listener.getsockname()[1]}")
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = listener.accept()
                held.append(conn)
                receiver.arrived.set()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        done.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def insert_operation(url: str, tenant: str, state: S, at: datetime, **overrides: Any) -> uuid.UUID:
    """An operation of ``tenant`` in ``state``, written as intake writes one (factories)."""
    values: dict[str, Any] = dict(
        request_fingerprint="f" * 64,
        route="/r",
        command={"a": 1},
        remote_job_id="job-1",
        requested_by="tester",
        create_deadline=at + timedelta(minutes=5),
        result_deadline=at + timedelta(hours=1),
        max_status_requests=10,
        max_transport_failures=3,
        next_poll_at=at,
        dispatched_at=None,
    )
    values.update(overrides)
    return insert_in(url, state, at=at, tenant=tenant, **values).operation_id


def write_on_a_step_connection(
    url: str, op: Operation, decided: Decided, at: datetime
) -> Operation:
    """A step's write as a worker makes it: one fenced statement on its autocommit session."""
    p = settled(op, plan(op, decided, actor="worker", now=at, answer=None, max_countdown=120))
    with step_session(url) as session:
        return store.write(session, op, p, now=at)


def escalate_on_a_step_connection(url: str, op_id: uuid.UUID, at: datetime) -> Operation:
    with step_session(url) as session:
        op = store.load(session, op_id)
    assert op is not None
    stop = escalate(op.state, EscalationReason.rate_limited, "429 six times in a row")
    return write_on_a_step_connection(url, op, Decided(action=stop), at)


def outbox_rows(url: str, op_id: uuid.UUID) -> list[dict[str, object]]:
    with transaction(url) as session:
        return notification_store.for_operation(session, op_id)
